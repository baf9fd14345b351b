// Second reading: the River client that works the staged jobs once the
// enqueuer has moved them: its workers, its config and defaults.

package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/rocketrides/rocketrides/internal/platform/mail"
	"github.com/rocketrides/rocketrides/internal/platform/trace"
)

// Kinds are the jobs the workers of NewClient handle, and so the kinds an
// enqueuer feeding them moves (EnqueuerConfig.Kinds).
func Kinds() []river.JobArgs {
	return []river.JobArgs{ReceiptArgs{}}
}

// DefaultMaxWorkers is how many jobs one worker process runs at once
// unless ClientConfig.MaxWorkers says otherwise. Receipts spend their time
// waiting on the mail server, so a handful of goroutines keeps one relay
// busy without flooding it.
const DefaultMaxWorkers = 10

// ClientConfig configures the River client that works receipts.
type ClientConfig struct {
	// Pool is the database holding River's queue and the tables the
	// workers read and write. Required.
	Pool *pgxpool.Pool

	// Mailer delivers the receipts. Required.
	Mailer mail.Mailer

	// MaxWorkers is how many jobs run at once. Defaults to
	// DefaultMaxWorkers.
	MaxWorkers int

	// JobTimeout bounds one attempt at a receipt. Zero keeps River's
	// default (a minute).
	JobTimeout time.Duration

	// RescueStuckJobsAfter is how long a job may stay running before
	// River's rescuer takes it back for another attempt. A worker that
	// lost its database mid-job (a failover) cannot mark the job done,
	// and without a rescue it would wait River's default hour. Rescuing
	// a job that is in fact still running is safe: a receipt already
	// sent is found in ride_receipts. Zero keeps River's default; it
	// must exceed JobTimeout.
	RescueStuckJobsAfter time.Duration

	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c *ClientConfig) validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("jobs: ClientConfig.Pool is required")
	case c.Mailer == nil:
		return errors.New("jobs: ClientConfig.Mailer is required")
	case c.MaxWorkers < 0:
		return fmt.Errorf("jobs: ClientConfig.MaxWorkers must not be negative, got %d", c.MaxWorkers)
	}
	return nil
}

// NewClient returns a River client that works receipts (every kind in
// Kinds) from the default queue once started.
func NewClient(config *ClientConfig) (*river.Client[pgx.Tx], error) {
	if config == nil {
		return nil, errors.New("jobs: ClientConfig is required (ClientConfig.Pool and ClientConfig.Mailer)")
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	logger := cmp.Or(config.Logger, slog.Default())
	worker, err := NewReceiptWorker(&ReceiptWorkerConfig{Pool: config.Pool, Mailer: config.Mailer, Logger: logger})
	if err != nil {
		return nil, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(riverpgxv5.New(config.Pool), &river.Config{
		JobTimeout:           config.JobTimeout,
		RescueStuckJobsAfter: config.RescueStuckJobsAfter,
		Logger:               logger,
		Middleware:           trace.RiverMiddleware(true), // a job's span links to the request that staged it
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cmp.Or(config.MaxWorkers, DefaultMaxWorkers)}},
		Workers:              workers,
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
