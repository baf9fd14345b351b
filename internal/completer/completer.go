// First reading: the completer. It claims requests their clients seem to
// have abandoned (idem.Store.ClaimAbandoned, whose SQL is in idem's
// abandoned.go) and resumes each through the same rides.Service the API
// runs (Service.Resume: rides' service.go), from the recovery point it
// reached.
//
// Left to a second reading: the Completer, its config and defaults
// (config.go); how a batch's keys are worked at once, and released
// unworked on shutdown (Completer.completeAll: concurrency.go); Run's
// loop (run.go).

package completer

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/rocketrides/rocketrides/internal/idem"
)

// RunOnce claims one batch of abandoned keys and drives each to a stored
// response. succeeded counts keys that reached finished, whatever their
// response (a stored 402 is as final as a 201); failed counts keys that
// stopped on an error again, left unlocked where they stopped and tried
// again after the retry interval. err is reserved for failing to claim.
// Up to Concurrency keys are worked at once (concurrency.go).
func (c *Completer) RunOnce(ctx context.Context) (succeeded, failed int, err error) {
	claimCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	keys, err := c.keys.ClaimAbandoned(claimCtx, c.minAge, c.retryInterval, c.batchSize)
	cancel()
	if err != nil {
		return 0, 0, fmt.Errorf("claim abandoned requests: %w", err)
	}
	succeeded, failed = c.completeAll(ctx, keys)
	if len(keys) > 0 {
		c.logger.InfoContext(ctx, "Completed batch of abandoned requests",
			slog.Int("claimed", len(keys)), slog.Int("succeeded", succeeded), slog.Int("failed", failed))
	}
	return succeeded, failed, nil
}

// complete resumes one claimed key and reports whether it finished.
func (c *Completer) complete(ctx context.Context, key *idem.Key) bool {
	// Detached from ctx: a shutdown lets the key in hand finish (cut off,
	// it would be safe too, but leave work for later).
	keyCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), keyTimeout)
	defer cancel()

	from := key.RecoveryPoint
	resp, err := c.service.Resume(keyCtx, key)
	if err != nil {
		// The service has unlocked the key where it stopped, or set it aside.
		c.logger.ErrorContext(ctx, "Abandoned request failed again",
			slog.Int64("idempotency_key_id", key.ID),
			slog.Int64("user_id", key.UserID),
			slog.String("from_recovery_point", string(from)),
			slog.String("recovery_point", string(key.RecoveryPoint)),
			slog.Bool("set_aside", key.AttentionReason != nil), // for a person: no completer takes it again
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
