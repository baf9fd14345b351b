// Second reading: Run, the completer's loop (package loop): batch after
// batch while there is work, a poll when idle, backoff after a failure.

package completer

import "context"

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
