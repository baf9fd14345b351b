// Package completer is the article's completer. It finds ride requests
// that stopped part way and that their clients seem to have given up on,
// and pushes each through to the end: the ride gets its one charge, its
// receipt job is staged, and the response is stored for a client that
// does come back.
//
// It needs no special knowledge of the ride DAG. It claims abandoned
// idempotency keys (idem.Store.ClaimAbandoned) and hands each to the same
// rides.Service the API runs, which loads the key's user and stored
// parameters and resumes from the key's recovery point: the internal path
// that lets it retry anyone's request.
package completer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/platform/loop"
	"github.com/rocketrides/rocketrides/internal/rides"
)

// Completer defaults.
const (
	// DefaultMinAge leaves a request to its client for a while: a client
	// retrying with backoff should get its own answer, not find that the
	// completer finished the request behind its back.
	DefaultMinAge = 5 * time.Minute

	// DefaultRetryInterval is how long a key must have been left alone
	// (by its client or an earlier completer pass) before the completer
	// tries it again, so a key that keeps failing is retried at this
	// pace, not on every poll.
	DefaultRetryInterval = time.Minute

	DefaultPollInterval = 10 * time.Second
	DefaultBatchSize    = 100

	// DefaultSettleWithin is what the API promises a client that stops
	// retrying after a 5xx (docs/openapi.yaml, "After a 5xx"): with the
	// defaults, the completer takes up its request, and settles its
	// ride, within this long of the last attempt, as long as the payment
	// provider answers. A key becomes due DefaultMinAge after it was
	// created and DefaultRetryInterval after it was last worked, both at
	// most the last attempt, and is claimed by the next poll: the sum
	// leaves the poll interval and the work itself a margin.
	DefaultSettleWithin = DefaultMinAge + DefaultRetryInterval

	// DefaultConcurrency is how many keys of a batch are worked at once.
	// A key spends most of its time waiting on Stripe, holding no
	// database connection, so one at a time would finish about four keys
	// a second against a Stripe that takes 250 ms.
	DefaultConcurrency = 16
)

const (
	// claimTimeout bounds the claim of a batch. The claim runs detached
	// from the caller's context: a claim cancelled after it committed
	// would leave its keys locked, unworked, until the lock timeout.
	claimTimeout = 30 * time.Second

	// keyTimeout bounds the work on one key, including the key finished
	// after a shutdown was asked for. It leaves room for the Stripe call
	// with stripe-go's own retries and the phases around it.
	keyTimeout = 2 * time.Minute
)

// Config configures a Completer. Keys and Service are required; every
// other field has a default.
type Config struct {
	// Keys is the store abandoned keys are claimed from. Required.
	Keys *idem.Store

	// Service resumes each claimed key: the same rides.Service the API
	// runs, on the same settings. Required.
	Service *rides.Service

	// MinAge: only keys created longer ago are completed. Defaults to
	// DefaultMinAge.
	MinAge time.Duration

	// RetryInterval: only keys last worked longer ago are completed.
	// Defaults to DefaultRetryInterval.
	RetryInterval time.Duration

	// PollInterval is how long an idle completer waits before looking
	// again. Defaults to DefaultPollInterval.
	PollInterval time.Duration

	// BatchSize is the most keys claimed at once. Defaults to
	// DefaultBatchSize.
	BatchSize int

	// Concurrency is how many keys of a batch are worked at once.
	// Defaults to DefaultConcurrency.
	Concurrency int

	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c *Config) validate() error {
	switch {
	case c.Keys == nil:
		return errors.New("completer: Config.Keys is required")
	case c.Service == nil:
		return errors.New("completer: Config.Service is required")
	case c.MinAge < 0:
		return fmt.Errorf("completer: Config.MinAge must not be negative, got %s", c.MinAge)
	case c.RetryInterval < 0:
		return fmt.Errorf("completer: Config.RetryInterval must not be negative, got %s", c.RetryInterval)
	case c.PollInterval < 0:
		return fmt.Errorf("completer: Config.PollInterval must not be negative, got %s", c.PollInterval)
	case c.BatchSize < 0:
		return fmt.Errorf("completer: Config.BatchSize must not be negative, got %d", c.BatchSize)
	case c.Concurrency < 0:
		return fmt.Errorf("completer: Config.Concurrency must not be negative, got %d", c.Concurrency)
	}
	return nil
}

// Completer pushes abandoned ride requests to the end.
//
// Completers may run side by side: a key is claimed by one of them at a
// time, and its fresh lock keeps clients and other completers off it
// while it is worked.
type Completer struct {
	keys          *idem.Store
	service       *rides.Service
	minAge        time.Duration
	retryInterval time.Duration
	pollInterval  time.Duration
	batchSize     int
	concurrency   int
	logger        *slog.Logger
	loop          *loop.Loop
}

// New returns a Completer for config.
func New(config *Config) (*Completer, error) {
	if config == nil {
		return nil, errors.New("completer: Config is required (Keys and Service)")
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	c := &Completer{
		keys:          config.Keys,
		service:       config.Service,
		minAge:        cmp.Or(config.MinAge, DefaultMinAge),
		retryInterval: cmp.Or(config.RetryInterval, DefaultRetryInterval),
		pollInterval:  cmp.Or(config.PollInterval, DefaultPollInterval),
		batchSize:     cmp.Or(config.BatchSize, DefaultBatchSize),
		concurrency:   cmp.Or(config.Concurrency, DefaultConcurrency),
		logger:        cmp.Or(config.Logger, slog.Default()),
	}
	var err error
	c.loop, err = loop.New(&loop.Config{
		Work:         c.pass,
		PollInterval: c.pollInterval,
		Logger:       c.logger,
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// RunOnce claims one batch of abandoned keys and drives each to a stored
// response. succeeded counts keys that reached finished, whatever their
// response (a declined card's stored 402 is as final as a 201). failed
// counts keys that stopped on an error again: each is logged, left
// unlocked at the recovery point it reached, and tried again after the
// retry interval. One failing key does not stop the batch; err is
// reserved for failing to claim one.
//
// Up to Concurrency keys are worked at once. When ctx is cancelled the
// keys in hand are finished and the rest of the batch is released
// unworked, so a shutdown is as quick as one key and leaves nothing
// locked.
func (c *Completer) RunOnce(ctx context.Context) (succeeded, failed int, err error) {
	claimCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	keys, err := c.keys.ClaimAbandoned(claimCtx, c.minAge, c.retryInterval, c.batchSize)
	cancel()
	if err != nil {
		return 0, 0, fmt.Errorf("claim abandoned requests: %w", err)
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		work = make(chan *idem.Key)
	)
	for range min(c.concurrency, len(keys)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for key := range work {
				ok := c.complete(ctx, key)
				mu.Lock()
				if ok {
					succeeded++
				} else {
					failed++
				}
				mu.Unlock()
			}
		}()
	}
	for i, key := range keys {
		if ctx.Err() == nil {
			select {
			case work <- key:
				continue
			case <-ctx.Done():
			}
		}
		c.release(ctx, keys[i:])
		break
	}
	close(work)
	wg.Wait()
	if len(keys) > 0 {
		c.logger.InfoContext(ctx, "Completed batch of abandoned requests",
			slog.Int("claimed", len(keys)), slog.Int("succeeded", succeeded), slog.Int("failed", failed))
	}
	return succeeded, failed, nil
}

// complete resumes one claimed key and reports whether it finished.
func (c *Completer) complete(ctx context.Context, key *idem.Key) bool {
	// Detached from ctx: a shutdown lets the key in hand finish instead
	// of cutting it off between its Stripe call and recording the charge.
	// That would be safe too (the next attempt repeats the call under the
	// same Stripe idempotency key), but would leave work for later.
	keyCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), keyTimeout)
	defer cancel()

	from := key.RecoveryPoint
	resp, err := c.service.Resume(keyCtx, key)
	if err != nil {
		// The service has unlocked the key at the recovery point it
		// reached (key.RecoveryPoint follows each committed phase).
		c.logger.ErrorContext(ctx, "Abandoned request failed again; it will be retried",
			slog.Int64("idempotency_key_id", key.ID),
			slog.Int64("user_id", key.UserID),
			slog.String("from_recovery_point", string(from)),
			slog.String("recovery_point", string(key.RecoveryPoint)),
			slog.Duration("retry_after", c.retryInterval),
			slog.Any("error", err))
		return false
	}
	c.logger.InfoContext(ctx, "Completed abandoned request",
		slog.Int64("idempotency_key_id", key.ID),
		slog.Int64("user_id", key.UserID),
		slog.String("from_recovery_point", string(from)),
		slog.Int("response_code", resp.Code))
	return true
}

// release unlocks keys that were claimed but will not be worked, so that
// a client's retry need not wait for the lock timeout.
func (c *Completer) release(ctx context.Context, keys []*idem.Key) {
	for _, key := range keys {
		// Unlock runs detached from ctx.
		if err := c.keys.Unlock(ctx, key); err != nil {
			c.logger.ErrorContext(ctx, "Release claimed key; it frees itself after the lock timeout",
				slog.Int64("idempotency_key_id", key.ID), slog.Any("error", err))
		}
	}
	c.logger.InfoContext(ctx, "Stopping: released claimed keys unworked", slog.Int("released", len(keys)))
}

// Run completes abandoned requests until ctx is cancelled, batch after
// batch while there is work and every PollInterval when idle. A failed
// claim (Postgres down) is logged and retried with backoff: the completer
// outlives it. On cancellation the key in hand is finished first (see
// RunOnce). Run returns nil once ctx is cancelled.
func (c *Completer) Run(ctx context.Context) error {
	return c.loop.Run(ctx)
}

// pass is one pass of Run's loop.
func (c *Completer) pass(ctx context.Context) (more bool, err error) {
	succeeded, failed, err := c.RunOnce(ctx)
	if err != nil {
		return false, err
	}
	// A full batch means more are probably waiting. Keys just worked
	// carry a fresh last_run_at, so the next claim takes new ones.
	return succeeded+failed == c.batchSize, nil
}
