// Command reaper deletes idempotency keys older than REAPER_MAX_AGE, in
// bounded batches, and lists the requests among them that never finished
// in abandoned_requests for a person to review: the article's reaper.
//
// With -once it reaps everything due, prints "reaped=N abandoned=M" and
// exits. Otherwise it runs until SIGINT or SIGTERM, finishing the batch in
// hand first.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/reaper"
)

func main() {
	once := flag.Bool("once", false, "reap everything due, print reaped=N abandoned=M and exit")
	flag.Parse()
	if err := run(*once); err != nil {
		fmt.Fprintln(os.Stderr, "reaper:", err)
		os.Exit(1)
	}
}

func run(once bool) error {
	logger, err := config.Logger("reaper")
	if err != nil {
		return err
	}
	var env config.Env
	databaseURL := env.Required("DATABASE_URL")
	maxAge := env.Duration("REAPER_MAX_AGE", reaper.DefaultMaxAge)
	batchSize := env.Int("REAPER_BATCH_SIZE", reaper.DefaultBatchSize)
	dutyCycle := env.Fraction("REAPER_DUTY_CYCLE", reaper.DefaultDutyCycle)
	pollInterval := env.Duration("REAPER_POLL_INTERVAL", reaper.DefaultPollInterval)
	// The API's setting: a key under a lock younger than this is being
	// worked and is left for a later pass.
	lockTimeout := env.Duration("IDEMPOTENCY_LOCK_TIMEOUT", idem.DefaultLockTimeout)
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

	keys, err := idem.New(&idem.Config{Pool: pool, LockTimeout: lockTimeout})
	if err != nil {
		return err
	}
	r, err := reaper.New(&reaper.Config{
		Keys:         keys,
		MaxAge:       maxAge,
		BatchSize:    batchSize,
		PollInterval: pollInterval,
		DutyCycle:    dutyCycle,
		Logger:       logger,
	})
	if err != nil {
		return err
	}

	if once {
		reaped, abandoned, err := r.RunOnce(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("reaped=%d abandoned=%d\n", reaped, abandoned)
		return nil
	}

	logger.Info("Reaper started", "max_age", maxAge, "batch_size", batchSize,
		"poll_interval", pollInterval, "lock_timeout", lockTimeout)
	if err := r.Run(ctx); err != nil {
		return err
	}
	logger.Info("Reaper stopped")
	return nil
}
