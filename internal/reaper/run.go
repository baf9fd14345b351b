// Second reading: Run, the reaper's loop (package loop): a pass every
// PollInterval, backoff after a failure, and the rest between batches
// that keeps the reaper to its duty cycle.

package reaper

import (
	"context"
	"time"
)

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
