// First reading: the reaper. It deletes idempotency keys past their
// lifetime, batch after batch (idem.Store.Reap, whose SQL is in idem's
// abandoned.go). The same statement lists each unfinished key in
// abandoned_requests for a person, and the batch's Settle
// (rides.SettleReaped) marks its ride needs_review in that transaction;
// once it has committed, the reaper logs each such key.
//
// Left to a second reading: the Reaper, its config and defaults
// (config.go); which deleted keys were unfinished (ReapedKey.Abandoned,
// idem's tombstone.go); forgetting the records of reaped keys, which
// refuse late retries (Reaper.forgetAll: forget.go); Run's loop and the
// rest between batches that keeps to the duty cycle (Reaper.rest,
// loop.Sleep: run.go).

package reaper

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/rocketrides/rocketrides/internal/platform/loop"
)

// RunOnce reaps every expired key, batch after batch, until a batch comes
// back short, and reports the keys deleted and, of those, the unfinished
// ones; then it forgets the records of reaped keys past RetainReaped. A
// cancelled ctx lets the batch in hand finish and starts no other.
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
