// Second reading: the cap on each user's charges, against card testing
// (package ratelimit has the counts). A ride request is counted when it is
// about to create its ride, the first thing it does that leads to a
// charge: after its claim, so that a replay of a finished key is answered
// from the claim and never counted or refused, and ahead of its first
// atomic phase, so that a refused request has no ride and no charge.
//
// The count is the first phase's guard (idem.Guard): on the fast path it
// goes in the phase's round trip, in a transaction of its own just ahead
// of the phase, and on the plain path first in the phase's transaction. It
// fails when the cap is reached, which leaves the phase unsent. The client's request is then
// answered 429 and its key deleted (idem.Store.Discard): nothing is stored
// on it, so the same key succeeds once the window has passed, and the
// completer cannot finish a request its client was told did not run. A
// key that cannot be deleted is not answered 429: it stays resumable, and
// its request fails as any other that leaves its key so. The
// completer's own attempt at a key its client left at started is counted
// too, and refused alike, but keeps its key: it tries again later, as the
// contract promises that client. On the fast path a count stands once it
// has committed, even if the phase behind it then fails and a retry is
// counted again: the cap errs towards refusing, never towards one charge
// too many.

package rides

import (
	"context"
	"fmt"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/ratelimit"
)

// capped is fn with the count of the request's charge sent ahead of it
// (idem.Tx.Guard) when the request is at started and charges are capped;
// otherwise fn itself.
func (r *request) capped(fn idem.PhaseFunc) idem.PhaseFunc {
	guard := r.chargeGuard()
	if guard == nil {
		return fn
	}
	return func(ctx context.Context, tx *idem.Tx) error {
		tx.Guard(guard)
		return fn(ctx, tx)
	}
}

// chargeGuard is the count of the request's charge, sent ahead of its
// first atomic phase; nil past started, where the charge was counted
// already, or when charges are not capped.
func (r *request) chargeGuard() *idem.Guard {
	if !r.charges.On() || r.key.RecoveryPoint != idem.Started {
		return nil
	}
	sql, args := ratelimit.ChargeGuard(r.charges, r.user.ID)
	return &idem.Guard{SQL: sql, Args: args}
}

// refused is err, a phase's failure, as the charge cap's refusal when it
// is one; a client's refused request gives up its key.
func (r *request) refused(ctx context.Context, err error) error {
	if !ratelimit.Refused(err) {
		return err
	}
	if r.client {
		if derr := r.keys.Discard(ctx, r.key); derr != nil {
			// The key stays, at started, and the completer may finish
			// it: a 429 saying nothing was stored would then be untrue.
			// The request fails as any other whose key stays resumable,
			// and its retry, counted again, learns what became of it.
			return fmt.Errorf("key %d: refused by the charge cap, and the key could not be discarded: %w", r.key.ID, derr)
		}
	}
	return fmt.Errorf("key %d: %w", r.key.ID, ratelimit.ChargeRefusal(ctx, r.pool, r.charges, r.user.ID))
}
