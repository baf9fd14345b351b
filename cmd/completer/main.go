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
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/rocketrides/rocketrides/internal/completer"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/platform/metrics"
	"github.com/rocketrides/rocketrides/internal/rides"
)

func main() {
	once := flag.Bool("once", false, "work one batch, print succeeded=N failed=M and exit")
	flag.Parse()
	if err := run(*once); err != nil {
		fmt.Fprintln(os.Stderr, "completer:", err)
		os.Exit(1)
	}
}

func run(once bool) error {
	logger, err := config.Logger("completer")
	if err != nil {
		return err
	}
	var env config.Env
	databaseURL := env.Required("DATABASE_URL")
	// The same settings the API runs the ride request with: the
	// completer must take and respect locks, and settle charges, exactly
	// as the API does.
	settings := rides.SettingsFromEnv(&env)
	minAge := env.Duration("COMPLETER_MIN_AGE", completer.DefaultMinAge)
	retryInterval := env.Duration("COMPLETER_RETRY_INTERVAL", completer.DefaultRetryInterval)
	pollInterval := env.Duration("COMPLETER_POLL_INTERVAL", completer.DefaultPollInterval)
	batchSize := env.Int("COMPLETER_BATCH_SIZE", completer.DefaultBatchSize)
	concurrency := env.Int("COMPLETER_CONCURRENCY", completer.DefaultConcurrency)
	metricsAddr := env.String("METRICS_ADDR", "")
	if err := env.Err(); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	pool, err := db.Open(ctx, databaseURL, 0)
	if err != nil {
		return err
	}
	defer pool.Close()

	reg := metrics.NewRegistry()
	metrics.RegisterPool(reg, pool)
	svc, keys, err := settings.NewService(pool, reg, logger)
	if err != nil {
		return err
	}
	c, err := completer.New(&completer.Config{
		Keys:          keys,
		Service:       svc,
		MinAge:        minAge,
		RetryInterval: retryInterval,
		PollInterval:  pollInterval,
		BatchSize:     batchSize,
		Concurrency:   concurrency,
		Logger:        logger,
	})
	if err != nil {
		return err
	}

	if once {
		succeeded, failed, err := c.RunOnce(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("succeeded=%d failed=%d\n", succeeded, failed)
		return nil
	}

	if err := metrics.Serve(ctx, metricsAddr, reg, logger); err != nil {
		return err
	}
	logger.Info("Completer started", "min_age", minAge, "retry_interval", retryInterval,
		"poll_interval", pollInterval, "batch_size", batchSize, "lock_timeout", settings.LockTimeout)
	if err := c.Run(ctx); err != nil {
		return err
	}
	logger.Info("Completer stopped")
	return nil
}
