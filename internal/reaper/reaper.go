// Package reaper is the article's reaper. Idempotency keys exist so that
// a request can be retried safely, not as a permanent record of requests,
// so the reaper deletes keys once they are older than anyone will retry
// them (72 hours by default: long enough that a bug shipped on a Friday
// can be fixed on Monday and the completer still push its requests
// through).
//
// A key that never finished is not just dropped: it is copied to
// abandoned_requests, in the same statement that deletes it, and logged,
// so that a person can find out what failed. Rides outlive their keys.
//
// Every deleted key also leaves a compact record in reaped_keys, in that
// same statement, so that a client retrying after the key's lifetime is
// refused (410 idempotency_key_expired) instead of running its request,
// and its charge, a second time. The reaper keeps that table bounded too:
// a record is forgotten RetainReaped (30 days by default) after its key
// was first used, and only then may the key's value start a new request.
//
// The SQL lives with the tables' owner, idem (Store.Reap and
// Store.ForgetReaped); this package holds the loop.
package reaper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/platform/loop"
)

// Reaper defaults.
const (
	DefaultMaxAge    = 72 * time.Hour
	DefaultBatchSize = 200
	// DefaultRetainReaped is how long after a key was first used its
	// record refuses late retries: long past any client's retries, and
	// short enough that the records stay a bounded table.
	DefaultRetainReaped = 30 * 24 * time.Hour
	DefaultPollInterval = time.Minute
	// DefaultDutyCycle keeps the reaper deleting a twentieth of the time
	// while it drains a backlog. Every reaped key is also an update of its
	// ride (the foreign key sets it to NULL), and its WAL competes with the
	// api's commits: at a tenth the api's p99 at 32 clients rose by a third
	// while the reaper ran, at a twentieth by a fifth (make bench, step 6).
	// That pace is about 300 keys a second on a small machine, 25 million
	// a day: a million-key backlog takes an hour, and in steady state the
	// reaper only removes what was created a retention period earlier.
	// Raise REAPER_DUTY_CYCLE where keys are created faster than that.
	DefaultDutyCycle = 0.05
)

const (
	// batchTimeout bounds one batch's statement, including the one
	// finished after a shutdown was asked for.
	batchTimeout = 30 * time.Second

	// Backoff after a failed pass: a pass is a long statement, and a
	// reaper that is a minute late costs nothing.
	minBackoff = time.Second
	maxBackoff = time.Minute
)

// Config configures a Reaper. Keys is required; every other field has a
// default.
type Config struct {
	// Keys is the store expired keys are reaped from. Required.
	Keys *idem.Store

	// MaxAge is the age past which a key is deleted. It must exceed the
	// store's lock timeout. Defaults to DefaultMaxAge.
	MaxAge time.Duration

	// RetainReaped is how long after a key was first used the record of
	// it, once reaped, is kept (and a retry with it refused). It must
	// exceed MaxAge. Defaults to DefaultRetainReaped.
	RetainReaped time.Duration

	// Settle, if not nil, is what the endpoints do about the keys a
	// batch deletes, in the batch's transaction (cmd/reaper passes
	// rides.SettleReaped).
	Settle idem.ReapFunc

	// BatchSize is the most keys deleted by one statement, which bounds
	// how long its row locks are held. Defaults to DefaultBatchSize.
	BatchSize int

	// PollInterval is how long the reaper waits between passes. Defaults
	// to DefaultPollInterval.
	PollInterval time.Duration

	// DutyCycle is the share of time the reaper spends deleting while it
	// drains a backlog: after a batch that took d it rests
	// d*(1-DutyCycle)/DutyCycle, leaving the database to the api. The
	// rest follows the batch's own cost, so it stretches when the
	// database is busy. 1 means no rest; zero means DefaultDutyCycle.
	DutyCycle float64

	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c *Config) validate() error {
	switch {
	case c.Keys == nil:
		return errors.New("reaper: Config.Keys is required")
	case c.MaxAge < 0:
		return fmt.Errorf("reaper: Config.MaxAge must not be negative, got %s", c.MaxAge)
	case c.RetainReaped < 0:
		return fmt.Errorf("reaper: Config.RetainReaped must not be negative, got %s", c.RetainReaped)
	case c.BatchSize < 0:
		return fmt.Errorf("reaper: Config.BatchSize must not be negative, got %d", c.BatchSize)
	case c.PollInterval < 0:
		return fmt.Errorf("reaper: Config.PollInterval must not be negative, got %s", c.PollInterval)
	case c.DutyCycle < 0 || c.DutyCycle > 1:
		return fmt.Errorf("reaper: Config.DutyCycle must be between 0 and 1, got %g", c.DutyCycle)
	}
	// A key younger than the lock timeout may belong to a request whose
	// client is still retrying it; reaping it would start that request
	// over, charge and all.
	maxAge := cmp.Or(c.MaxAge, DefaultMaxAge)
	if maxAge <= c.Keys.LockTimeout() {
		return fmt.Errorf("reaper: Config.MaxAge %s must exceed the idempotency lock timeout %s", maxAge, c.Keys.LockTimeout())
	}
	// A record forgotten as soon as its key is reaped refuses nothing.
	if retain := cmp.Or(c.RetainReaped, DefaultRetainReaped); retain <= maxAge {
		return fmt.Errorf("reaper: Config.RetainReaped %s must exceed Config.MaxAge %s", retain, maxAge)
	}
	return nil
}

// Reaper deletes expired idempotency keys. Reapers may run side by side:
// each batch takes only keys no other reaper holds.
type Reaper struct {
	dutyCycle    float64
	keys         *idem.Store
	maxAge       time.Duration
	retainReaped time.Duration
	settle       idem.ReapFunc
	batchSize    int
	pollInterval time.Duration
	logger       *slog.Logger
	loop         *loop.Loop
}

// New returns a Reaper for config.
func New(config *Config) (*Reaper, error) {
	if config == nil {
		return nil, errors.New("reaper: Config is required (Keys)")
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	r := &Reaper{
		keys:         config.Keys,
		maxAge:       cmp.Or(config.MaxAge, DefaultMaxAge),
		retainReaped: cmp.Or(config.RetainReaped, DefaultRetainReaped),
		settle:       config.Settle,
		batchSize:    cmp.Or(config.BatchSize, DefaultBatchSize),
		pollInterval: cmp.Or(config.PollInterval, DefaultPollInterval),
		dutyCycle:    cmp.Or(config.DutyCycle, DefaultDutyCycle),
		logger:       cmp.Or(config.Logger, slog.Default()),
	}
	var err error
	r.loop, err = loop.New(&loop.Config{
		Work:         r.pass,
		PollInterval: r.pollInterval,
		MinBackoff:   minBackoff,
		MaxBackoff:   maxBackoff,
		Logger:       r.logger,
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// RunOnce reaps every expired key, batch after batch, until a batch comes
// back short: nothing more is due, or what is left is locked (by a
// request working it, or by another reaper). It reports the keys deleted
// and, of those, the unfinished ones copied to abandoned_requests. Then
// it forgets, the same way, the records of reaped keys past
// RetainReaped, and logs how many. When ctx is cancelled the batch in
// hand is finished and no other is started. With an error it returns
// what the batches before it reaped.
func (r *Reaper) RunOnce(ctx context.Context) (reaped, abandoned int, err error) {
	reaped, abandoned, err = r.reapAll(ctx)
	if err != nil {
		return reaped, abandoned, err
	}
	return reaped, abandoned, r.forgetAll(ctx)
}

// reapAll is RunOnce's reaping.
func (r *Reaper) reapAll(ctx context.Context) (reaped, abandoned int, err error) {
	for {
		// Detached, so that a shutdown does not lose count of a batch
		// that committed; batchTimeout keeps it bounded.
		batchCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
		begin := time.Now()
		keys, err := r.keys.Reap(batchCtx, r.maxAge, r.batchSize, r.settle)
		took := time.Since(begin)
		cancel()
		if err != nil {
			return reaped, abandoned, fmt.Errorf("reap idempotency keys: %w", err)
		}
		reaped += len(keys)
		for _, key := range keys {
			if !key.Abandoned() {
				continue
			}
			abandoned++
			r.logger.WarnContext(ctx, "Reaped a request that never finished; listed in abandoned_requests for review",
				slog.Int64("idempotency_key_id", key.ID),
				slog.Int64("user_id", key.UserID),
				slog.String("recovery_point", string(key.RecoveryPoint)),
				slog.String("reason", *key.Reason))
		}
		if len(keys) < r.batchSize || ctx.Err() != nil {
			break
		}
		_ = loop.Sleep(ctx, r.rest(took))
	}
	if reaped > 0 {
		r.logger.InfoContext(ctx, "Reaped expired idempotency keys",
			slog.Int("reaped", reaped), slog.Int("abandoned", abandoned), slog.Duration("max_age", r.maxAge))
	}
	return reaped, abandoned, nil
}

// forgetAll is RunOnce's forgetting of reaped keys past their retention,
// batch after batch at the same pace as the reaping.
func (r *Reaper) forgetAll(ctx context.Context) error {
	forgotten := 0
	for ctx.Err() == nil {
		batchCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
		begin := time.Now()
		n, err := r.keys.ForgetReaped(batchCtx, r.retainReaped, r.batchSize)
		took := time.Since(begin)
		cancel()
		if err != nil {
			return fmt.Errorf("forget reaped idempotency keys: %w", err)
		}
		forgotten += n
		if n < r.batchSize {
			break
		}
		_ = loop.Sleep(ctx, r.rest(took))
	}
	if forgotten > 0 {
		r.logger.InfoContext(ctx, "Forgot reaped idempotency keys past their retention; their values may start new requests",
			slog.Int("forgotten", forgotten), slog.Duration("retention", r.retainReaped))
	}
	return nil
}

// Run reaps expired keys every PollInterval until ctx is cancelled. A
// failed pass (Postgres down) is logged and retried with backoff: the
// reaper outlives it. Run returns nil once ctx is cancelled.
func (r *Reaper) Run(ctx context.Context) error {
	return r.loop.Run(ctx)
}

// pass is one pass of Run's loop. RunOnce reaps until nothing more is
// due, so a pass never leaves work waiting.
func (r *Reaper) pass(ctx context.Context) (more bool, err error) {
	_, _, err = r.RunOnce(ctx)
	return false, err
}

// rest is how long to rest after a batch that took d, to keep to the duty
// cycle.
func (r *Reaper) rest(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (1 - r.dutyCycle) / r.dutyCycle)
}
