// Second reading: how the completer works a batch (completer.go): up to
// Concurrency keys at once, and on shutdown the keys in hand finished and
// the rest released unworked.

package completer

import (
	"context"
	"log/slog"
	"sync"

	"github.com/rocketrides/rocketrides/internal/idem"
)

// completeAll completes keys, up to Concurrency at once, and counts those
// that finished and those that failed again. When ctx is cancelled the
// keys in hand are finished and the rest are released unworked.
func (c *Completer) completeAll(ctx context.Context, keys []*idem.Key) (succeeded, failed int) {
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
	return succeeded, failed
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
