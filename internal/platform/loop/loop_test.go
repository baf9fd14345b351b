package loop_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/loop"
)

// recorder is a slog.Handler keeping the records logged through it.
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec)
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// backoffs are the backoff attributes of the failed passes logged so far.
func (r *recorder) backoffs() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Duration
	for _, rec := range r.records {
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "backoff" {
				out = append(out, a.Value.Duration())
			}
			return true
		})
	}
	return out
}

// step is what a scripted pass returns.
type step struct {
	more bool
	err  error
}

func TestLoop(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		logs *recorder

		mu     sync.Mutex
		events []string // "pass", and "wait <d>" for each idle wait
	}

	// setup returns a loop that runs script's passes in order, then
	// cancels ctx on the next pass.
	setup := func(t *testing.T, config loop.Config, script []step) (*testBundle, *loop.Loop, context.Context) {
		t.Helper()
		b := &testBundle{logs: &recorder{}}
		ctx, cancel := context.WithCancel(t.Context())
		t.Cleanup(cancel)
		passes := 0
		config.Work = func(context.Context) (bool, error) {
			b.mu.Lock()
			defer b.mu.Unlock()
			if passes == len(script) {
				// More waiting: the loop goes on only if it missed the
				// shutdown.
				cancel()
				return true, nil
			}
			b.events = append(b.events, "pass")
			s := script[passes]
			passes++
			return s.more, s.err
		}
		config.Wait = func(_ context.Context, d time.Duration) {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.events = append(b.events, "wait "+d.String())
		}
		config.Logger = slog.New(b.logs)
		l, err := loop.New(&config)
		require.NoError(t, err)
		return b, l, ctx
	}

	run := func(t *testing.T, l *loop.Loop, ctx context.Context) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after cancellation")
		}
	}

	t.Run("GoesOnAtOnceWhileMoreIsWaitingAndPollsWhenIdle", func(t *testing.T) {
		t.Parallel()
		b, l, ctx := setup(t, loop.Config{PollInterval: time.Hour},
			[]step{{more: true}, {more: true}, {more: false}, {more: true}, {more: false}})
		run(t, l, ctx)
		require.Equal(t, []string{"pass", "pass", "pass", "wait 1h0m0s", "pass", "pass", "wait 1h0m0s"}, b.events)
		require.Empty(t, b.logs.backoffs())
	})

	t.Run("BacksOffDoublingAfterFailuresAndStartsOver", func(t *testing.T) {
		t.Parallel()
		boom := errors.New("boom")
		b, l, ctx := setup(t, loop.Config{PollInterval: time.Hour, MinBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond},
			[]step{{err: boom}, {err: boom}, {err: boom}, {err: boom}, {more: true}, {err: boom}})
		run(t, l, ctx)
		require.Equal(t, []time.Duration{1, 2, 4, 4, 1}, durations(b.logs.backoffs(), time.Millisecond),
			"doubling, capped at MaxBackoff, and from MinBackoff again after a pass that worked")
		require.Equal(t, []string{"pass", "pass", "pass", "pass", "pass", "pass"}, b.events,
			"a failed pass is followed by the backoff, not the idle wait")
		require.Equal(t, "Background pass failed; retrying after backoff", b.logs.records[0].Message)
	})

	t.Run("ShutdownCutsTheIdleWaitShort", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		passed := make(chan struct{}, 1)
		l, err := loop.New(&loop.Config{
			PollInterval: time.Hour,
			Work: func(context.Context) (bool, error) {
				select {
				case passed <- struct{}{}:
				default:
				}
				return false, nil
			},
			Logger: slog.New(slog.DiscardHandler),
		})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		<-passed
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Run slept through the shutdown")
		}
	})

	t.Run("ShutdownCutsTheBackoffShort", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		failed := make(chan struct{}, 1)
		l, err := loop.New(&loop.Config{
			PollInterval: time.Hour,
			MinBackoff:   time.Hour,
			MaxBackoff:   time.Hour,
			Work: func(context.Context) (bool, error) {
				select {
				case failed <- struct{}{}:
				default:
				}
				return false, errors.New("down")
			},
			Logger: slog.New(slog.DiscardHandler),
		})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		<-failed
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Run backed off through the shutdown")
		}
	})

	t.Run("RefusesABadConfig", func(t *testing.T) {
		t.Parallel()
		work := func(context.Context) (bool, error) { return false, nil }
		for want, config := range map[string]*loop.Config{
			"loop: Config is required":                            nil,
			"loop: Config.Work is required":                       {PollInterval: time.Second},
			"loop: Config.PollInterval must be positive, got 0s":  {Work: work},
			"loop: Config.PollInterval must be positive, got -1s": {Work: work, PollInterval: -time.Second},
			"loop: Config.MinBackoff must not be negative":        {Work: work, PollInterval: time.Second, MinBackoff: -1},
			"loop: Config.MaxBackoff must not be negative":        {Work: work, PollInterval: time.Second, MaxBackoff: -1},
			"loop: Config.MaxBackoff 1s must not be below":        {Work: work, PollInterval: time.Second, MinBackoff: time.Minute, MaxBackoff: time.Second},
		} {
			_, err := loop.New(config)
			require.ErrorContains(t, err, want)
		}
	})
}

func TestSleep(t *testing.T) {
	t.Parallel()

	t.Run("WaitsTheDuration", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		require.NoError(t, loop.Sleep(t.Context(), 20*time.Millisecond))
		require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
	})

	t.Run("StopsOnShutdown", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(20*time.Millisecond, cancel)
		start := time.Now()
		require.ErrorIs(t, loop.Sleep(ctx, time.Hour), context.Canceled)
		require.Less(t, time.Since(start), 10*time.Second)
	})
}

// durations expresses ds in units of unit.
func durations(ds []time.Duration, unit time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d / unit
	}
	return out
}
