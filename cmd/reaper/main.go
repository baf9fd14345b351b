// Command reaper deletes idempotency keys older than REAPER_MAX_AGE, in
// bounded batches, and lists the requests among them that never finished
// in abandoned_requests for a person to review: the article's reaper. It
// keeps a record of each key it deletes, which refuses the key's late
// retries, until REAPED_KEY_RETENTION after the key was first used.
//
// With -once it reaps everything due, prints "reaped=N abandoned=M" and
// exits. Otherwise it runs until SIGINT or SIGTERM, finishing the batch in
// hand first.
package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/process"
	"github.com/rocketrides/rocketrides/internal/reaper"
	"github.com/rocketrides/rocketrides/internal/rides"
)

func main() { process.Main(command()) }

// command is the process, for main and its tests.
func command() *process.Config {
	return &process.Config{
		Name:      "reaper",
		OnceUsage: "reap everything due, print reaped=N abandoned=M and exit",
		Build:     build,
	}
}

func build(ctx context.Context, env *config.Env, logger *slog.Logger) (*process.Program, error) {
	databaseURL := env.Required("DATABASE_URL")
	cfg := reaper.ConfigFromEnv(env)
	// A ride whose request is reaped unfinished waits for a person.
	cfg.Settle, cfg.Logger = rides.SettleReaped, logger
	// The API's setting: a key under a lock younger than this is being
	// worked and is left for a later pass.
	lockTimeout := idem.LockTimeoutFromEnv(env)
	metricsAddr := env.String("METRICS_ADDR", "")
	if err := env.Err(); err != nil {
		return nil, err
	}

	pool, reg, err := process.OpenDatabase(ctx, databaseURL)
	if err != nil {
		return nil, err
	}
	if cfg.Keys, err = idem.New(&idem.Config{Pool: pool, LockTimeout: lockTimeout}); err != nil {
		return nil, err
	}
	r, err := reaper.New(cfg)
	if err != nil {
		return nil, err
	}

	return &process.Program{
		Run: r.Run,
		Once: func(ctx context.Context) (string, error) {
			reaped, abandoned, err := r.RunOnce(ctx)
			return fmt.Sprintf("reaped=%d abandoned=%d", reaped, abandoned), err
		},
		Metrics:     reg,
		MetricsAddr: metricsAddr,
		Close:       pool.Close,
	}, nil
}
