package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

// NewWorkers returns the River workers of this package, one per kind the
// enqueuer moves (see knownKinds).
func NewWorkers(pool *pgxpool.Pool, mailer Mailer, logger *slog.Logger) *river.Workers {
	workers := river.NewWorkers()
	river.AddWorker(workers, NewReceiptWorker(pool, mailer, logger))
	return workers
}

// workerConcurrency is how many jobs one worker process runs at once.
// Receipts spend their time waiting on the mail server, so a handful of
// goroutines keeps one relay busy without flooding it.
const workerConcurrency = 10

// NewWorkerClient returns a River client that works this package's jobs
// from the default queue once started.
func NewWorkerClient(pool *pgxpool.Pool, mailer Mailer, logger *slog.Logger) (*river.Client[pgx.Tx], error) {
	if logger == nil {
		logger = slog.Default()
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:  logger,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workerConcurrency}},
		Workers: NewWorkers(pool, mailer, logger),
	})
	if err != nil {
		return nil, fmt.Errorf("create river worker client: %w", err)
	}
	return client, nil
}

// drainCheckInterval is how often WorkAvailable looks whether the queue
// has run dry.
const drainCheckInterval = 100 * time.Millisecond

// WorkAvailable starts client, works the default queue until no job is
// available or running, stops client and reports how many jobs were
// worked (completed, failed, cancelled or snoozed). It stops early when
// ctx is done; a job that fails is retried later, not waited for.
func WorkAvailable(ctx context.Context, client *river.Client[pgx.Tx]) (int, error) {
	// No need to unsubscribe: stopping the client closes the channel,
	// which is what tells the count below it has every event.
	events, _ := client.Subscribe(
		river.EventKindJobCompleted,
		river.EventKindJobFailed,
		river.EventKindJobCancelled,
		river.EventKindJobSnoozed,
	)
	if err := client.Start(ctx); err != nil {
		return 0, fmt.Errorf("start river client: %w", err)
	}

	worked := 0
	tick := time.NewTicker(drainCheckInterval)
	defer tick.Stop()
	var waitErr error
wait:
	for {
		select {
		case <-ctx.Done():
			break wait
		case <-events:
			worked++
		case <-tick.C:
			// A fetched job is running until its completion is
			// persisted, so an empty result means every job taken has
			// been finished and recorded.
			res, err := client.JobList(ctx, river.NewJobListParams().
				Queues(river.QueueDefault).
				States(rivertype.JobStateAvailable, rivertype.JobStateRunning).
				First(1))
			if err != nil {
				if ctx.Err() != nil {
					break wait
				}
				waitErr = fmt.Errorf("list remaining jobs: %w", err)
				break wait
			}
			if len(res.Jobs) == 0 {
				break wait
			}
		}
	}

	// A soft stop lets a job in progress finish; River then closes the
	// subscription once every event has been delivered.
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return worked, fmt.Errorf("stop river client: %w", err)
	}
	for range events {
		worked++
	}
	return worked, waitErr
}
