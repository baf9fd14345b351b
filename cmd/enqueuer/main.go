// Command enqueuer moves staged jobs into River once the transactions that
// staged them have committed: the transactionally-staged job drain.
//
// With -once it moves one batch, prints "enqueued=N" and exits. Otherwise
// it runs until SIGINT or SIGTERM, finishing the batch in hand first.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/platform/metrics"
	"github.com/rocketrides/rocketrides/internal/receipt"
	"github.com/rocketrides/rocketrides/internal/staged"
)

func main() {
	once := flag.Bool("once", false, "move one batch, print enqueued=N and exit")
	flag.Parse()
	if err := run(*once); err != nil {
		fmt.Fprintln(os.Stderr, "enqueuer:", err)
		os.Exit(1)
	}
}

func run(once bool) error {
	logger, err := config.Logger("enqueuer")
	if err != nil {
		return err
	}
	var env config.Env
	databaseURL := env.Required("DATABASE_URL")
	pollInterval := env.Duration("ENQUEUER_POLL_INTERVAL", staged.DefaultPollInterval)
	batchSize := env.Int("ENQUEUER_BATCH_SIZE", staged.DefaultBatchSize)
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
	enqueued := metrics.NewEnqueued(reg)
	enqueuer, err := staged.New(&staged.Config{
		Pool:         pool,
		Kinds:        receipt.Kinds(),
		BatchSize:    batchSize,
		PollInterval: pollInterval,
		Logger:       logger,
		OnMoved:      func(n int) { enqueued.Add(float64(n)) },
	})
	if err != nil {
		return err
	}

	if once {
		moved, err := enqueuer.RunOnce(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("enqueued=%d\n", moved)
		return nil
	}

	if err := metrics.Serve(ctx, metricsAddr, reg, logger); err != nil {
		return err
	}
	logger.Info("Enqueuer started", "batch_size", batchSize, "poll_interval", pollInterval)
	if err := enqueuer.Run(ctx); err != nil {
		return err
	}
	logger.Info("Enqueuer stopped")
	return nil
}
