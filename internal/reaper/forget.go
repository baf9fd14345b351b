// Second reading: the reaper's second task. Each key it reaps leaves a
// record in reaped_keys that refuses a late retry (idem's tombstone.go);
// the reaper forgets those records once they are past RetainReaped
// (idem.Store.ForgetReaped).

package reaper

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/rocketrides/rocketrides/internal/platform/loop"
)

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
