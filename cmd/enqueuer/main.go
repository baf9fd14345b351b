// Command enqueuer moves staged jobs into River once the transactions that
// staged them have committed: the transactionally-staged job drain.
//
// With -once it moves one batch, prints "enqueued=N" and exits. Otherwise
// it runs until SIGINT or SIGTERM, finishing the batch in hand first.
package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/rocketrides/rocketrides/internal/jobs"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/metrics"
	"github.com/rocketrides/rocketrides/internal/platform/process"
)

func main() { process.Main(command()) }

// command is the process, for main and its tests.
func command() *process.Config {
	return &process.Config{
		Name:      "enqueuer",
		OnceUsage: "move one batch, print enqueued=N and exit",
		Build:     build,
	}
}

func build(ctx context.Context, env *config.Env, logger *slog.Logger) (*process.Program, error) {
	databaseURL := env.Required("DATABASE_URL")
	cfg := &jobs.EnqueuerConfig{
		// The kinds the worker works: a job of any other kind stays
		// staged, and logged, rather than failing in River.
		Kinds:        jobs.Kinds(),
		PollInterval: env.Duration("ENQUEUER_POLL_INTERVAL", jobs.DefaultPollInterval),
		BatchSize:    env.Int("ENQUEUER_BATCH_SIZE", jobs.DefaultBatchSize),
		Logger:       logger,
	}
	metricsAddr := env.String("METRICS_ADDR", "")
	if err := env.Err(); err != nil {
		return nil, err
	}

	pool, reg, err := process.OpenDatabase(ctx, databaseURL)
	if err != nil {
		return nil, err
	}
	enqueued := metrics.NewEnqueued(reg)
	cfg.Pool = pool
	cfg.OnMoved = func(n int) { enqueued.Add(float64(n)) }
	e, err := jobs.NewEnqueuer(cfg)
	if err != nil {
		return nil, err
	}

	return &process.Program{
		Run: e.Run,
		Once: func(ctx context.Context) (string, error) {
			moved, err := e.RunOnce(ctx)
			return fmt.Sprintf("enqueued=%d", moved), err
		},
		Metrics:     reg,
		MetricsAddr: metricsAddr,
		Close:       pool.Close,
	}, nil
}
