// Command completer pushes ride requests that their clients abandoned part
// way through to completion, through the same service code the API runs:
// the article's completer.
//
// With -once it works one batch, prints "succeeded=N failed=M" and exits.
// Otherwise it runs until SIGINT or SIGTERM, finishing the key in hand
// first.
package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/rocketrides/rocketrides/internal/completer"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/problem"
	"github.com/rocketrides/rocketrides/internal/platform/process"
	"github.com/rocketrides/rocketrides/internal/rides"
)

func main() { process.Main(command()) }

// command is the process, for main and its tests.
func command() *process.Config {
	return &process.Config{
		Name:      "completer",
		OnceUsage: "work one batch, print succeeded=N failed=M and exit",
		Build:     build,
	}
}

func build(ctx context.Context, env *config.Env, logger *slog.Logger) (*process.Program, error) {
	databaseURL := env.Required("DATABASE_URL")
	// The same settings the API runs the ride request with: the
	// completer must take and respect locks, and settle charges, exactly
	// as the API does.
	settings := rides.SettingsFromEnv(env)
	settings.Actor = "completer"
	cfg := &completer.Config{
		MinAge:        env.Duration("COMPLETER_MIN_AGE", completer.DefaultMinAge),
		RetryInterval: env.Duration("COMPLETER_RETRY_INTERVAL", completer.DefaultRetryInterval),
		PollInterval:  env.Duration("COMPLETER_POLL_INTERVAL", completer.DefaultPollInterval),
		BatchSize:     env.Int("COMPLETER_BATCH_SIZE", completer.DefaultBatchSize),
		Concurrency:   env.Int("COMPLETER_CONCURRENCY", completer.DefaultConcurrency),
		Logger:        logger,
	}
	metricsAddr := env.String("METRICS_ADDR", "")
	// A request it finishes may store a problem on its key.
	typeBase := problem.ReadTypeBase(env)
	if err := env.Err(); err != nil {
		return nil, err
	}
	problem.SetTypeBase(typeBase)

	pool, reg, err := process.OpenDatabase(ctx, databaseURL)
	if err != nil {
		return nil, err
	}
	if cfg.Service, cfg.Keys, err = settings.NewService(ctx, pool, reg, logger); err != nil {
		pool.Close()
		return nil, err
	}
	c, err := completer.New(cfg)
	if err != nil {
		return nil, err
	}

	return &process.Program{
		Run: c.Run,
		Once: func(ctx context.Context) (string, error) {
			succeeded, failed, err := c.RunOnce(ctx)
			return fmt.Sprintf("succeeded=%d failed=%d", succeeded, failed), err
		},
		Metrics:     reg,
		MetricsAddr: metricsAddr,
		Close:       pool.Close,
	}, nil
}
