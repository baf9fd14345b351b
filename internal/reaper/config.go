// Second reading: the Reaper, its Config and their defaults (reaper.go
// reaps).

package reaper

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/platform/loop"
)

// Reaper defaults.
const (
	DefaultMaxAge    = idem.DefaultKeyLifetime
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
