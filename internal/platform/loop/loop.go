// Package loop is the one base of the background processes' loops: the
// completer's, the reaper's and the enqueuer's. A Loop runs a pass of
// work after another until shutdown: at once while work is waiting, after
// PollInterval when there was none, and after a growing backoff when a
// pass failed, so that a process outlives a Postgres restart without
// hammering it while it is down.
//
// A shutdown (the context ending) stops the loop between passes and cuts
// its waits short. The pass in hand decides itself what to finish: the
// completer finishes the key it is charging, the reaper the batch it is
// deleting.
package loop

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Loop defaults.
const (
	// DefaultMinBackoff is the wait after a first failed pass: long
	// enough not to spin on a database that refuses connections.
	DefaultMinBackoff = 250 * time.Millisecond

	// DefaultMaxBackoff caps the wait, which doubles with each failed
	// pass in a row, so that work resumes soon after the cause is gone.
	DefaultMaxBackoff = 30 * time.Second
)

// Config configures a Loop.
type Config struct {
	// Work does one pass. more reports that work is probably still
	// waiting (a batch came back full), and the next pass starts at once.
	// An error is logged and the next pass waits out the backoff; it
	// never stops the loop. Required.
	Work func(ctx context.Context) (more bool, err error)

	// PollInterval is how long the loop waits after a pass that left
	// nothing waiting. Required: each loop has its own pace.
	PollInterval time.Duration

	// Wait waits up to d for new work, or until ctx is done, after a pass
	// that left nothing waiting. Defaults to Sleep. The enqueuer waits on
	// a Postgres LISTEN instead, which a new job cuts short.
	Wait func(ctx context.Context, d time.Duration)

	// MinBackoff is the wait after a first failed pass; it doubles with
	// each failure in a row up to MaxBackoff and starts over after a
	// pass that succeeds. Default DefaultMinBackoff and
	// DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration

	// Logger receives a line per failed pass. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

func (c *Config) validate() error {
	switch {
	case c.Work == nil:
		return errors.New("loop: Config.Work is required")
	case c.PollInterval <= 0:
		return fmt.Errorf("loop: Config.PollInterval must be positive, got %s", c.PollInterval)
	case c.MinBackoff < 0:
		return fmt.Errorf("loop: Config.MinBackoff must not be negative, got %s", c.MinBackoff)
	case c.MaxBackoff < 0:
		return fmt.Errorf("loop: Config.MaxBackoff must not be negative, got %s", c.MaxBackoff)
	case c.MaxBackoff != 0 && c.MaxBackoff < cmp.Or(c.MinBackoff, DefaultMinBackoff):
		return fmt.Errorf("loop: Config.MaxBackoff %s must not be below MinBackoff %s",
			c.MaxBackoff, cmp.Or(c.MinBackoff, DefaultMinBackoff))
	}
	return nil
}

// Loop runs passes of work until shutdown.
type Loop struct {
	work         func(ctx context.Context) (bool, error)
	pollInterval time.Duration
	wait         func(ctx context.Context, d time.Duration)
	minBackoff   time.Duration
	maxBackoff   time.Duration
	logger       *slog.Logger
}

// New returns a Loop for config.
func New(config *Config) (*Loop, error) {
	if config == nil {
		return nil, errors.New("loop: Config is required")
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	l := &Loop{
		work:         config.Work,
		pollInterval: config.PollInterval,
		wait:         config.Wait,
		minBackoff:   cmp.Or(config.MinBackoff, DefaultMinBackoff),
		maxBackoff:   cmp.Or(config.MaxBackoff, DefaultMaxBackoff),
		logger:       cmp.Or(config.Logger, slog.Default()),
	}
	if l.wait == nil {
		l.wait = func(ctx context.Context, d time.Duration) { _ = Sleep(ctx, d) }
	}
	return l, nil
}

// Run runs passes until ctx is done, and then returns nil.
func (l *Loop) Run(ctx context.Context) error {
	backoff := l.minBackoff
	for ctx.Err() == nil {
		more, err := l.work(ctx)
		switch {
		case err != nil:
			l.logger.ErrorContext(ctx, "Background pass failed; retrying after backoff",
				slog.Any("error", err), slog.Duration("backoff", backoff))
			_ = Sleep(ctx, backoff)
			backoff = min(backoff*2, l.maxBackoff)
		case more:
			backoff = l.minBackoff
		default:
			backoff = l.minBackoff
			l.wait(ctx, l.pollInterval)
		}
	}
	return nil
}

// Sleep waits for d, or until ctx is done; then it returns ctx.Err(), so
// that a caller can tell a shutdown from the end of the wait.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
