// Second reading, beyond the article. The charge step as the article has
// it lets Stripe's idempotency key settle every retry: asked again with
// the same key, Stripe answers with what it did the first time. Two things
// leave a charge's outcome ambiguous all the same, and this file handles
// them:
//
//   - Stripe forgets an idempotency key after StripeKeyRetention. A retry
//     that late would charge a second time, so it first looks for the
//     charge an earlier attempt made, by the metadata that names our key,
//     and adopts it (adoptForgottenCharge).
//   - Stripe answered 500 and stored that answer against the key: it
//     replays it on every retry, and asking again cannot tell whether the
//     charge happened. A request gets MaxChargeAttempts such answers, then
//     its key is set aside for a human (unknownOutcome, setAside).
//
// And two answers mean the charge Stripe holds under the key may not be
// this request's, so it is neither recorded nor made again under another
// key; the request is set aside for a person, naming the charge:
//
//   - Stripe refuses the key as used with other parameters (keyConflict).
//   - Stripe replays a charge, as it does for a retry and for a request
//     whose first row the database lost, but the charge names another
//     request, or another ride already records it (checkReplay).

package rides

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/payment"
)

// adoptForgottenCharge looks at Stripe for the charge of an earlier
// attempt, when Stripe may have forgotten the attempt's idempotency key,
// and records it if there is one. adopted reports whether it did, and the
// charge step is then over.
func (r *request) adoptForgottenCharge(ctx context.Context) (adopted bool, err error) {
	if !r.stripeMayHaveForgotten() {
		return false, nil
	}
	field, value := chargeMatch(r.key)
	chargeID, found, err := r.payments.FindCharge(ctx, r.user.StripeCustomerID,
		field, value, r.key.FirstForeignAttemptAt.Add(-time.Hour))
	if err != nil {
		return false, fmt.Errorf("look up earlier charge of ride %d: %w", r.ride.ID, err)
	}
	if !found {
		return false, nil
	}
	r.logger.InfoContext(ctx, "Adopting charge found at Stripe from an earlier attempt",
		slog.Int64("idempotency_key_id", r.key.ID),
		slog.Int64("ride_id", r.ride.ID),
		slog.String("charge_id", chargeID))
	return true, r.phase(ctx, r.recordCharge(chargeID))
}

// stripeMayHaveForgotten reports whether the charge was first attempted so
// long ago that Stripe may no longer hold its idempotency key. Repeating
// the charge then could charge twice, so the charge is looked up first.
// The margin covers clock skew and a slow first attempt.
func (r *request) stripeMayHaveForgotten() bool {
	if r.key.FirstForeignAttemptAt == nil {
		return false
	}
	margin := min(time.Hour, r.stripeRetention/24)
	return time.Since(*r.key.FirstForeignAttemptAt) >= r.stripeRetention-margin
}

// unknownOutcome counts a charge attempt that ended in chargeErr, an
// answer Stripe stored and will replay to every retry. The request keeps
// its place for a bounded number of such attempts, then its key is set
// aside. Outages do not count: Stripe stored nothing, and a retry settles
// them.
func (r *request) unknownOutcome(ctx context.Context, chargeErr error) error {
	n, err := r.keys.RecordUnknownOutcome(ctx, r.key)
	if err != nil {
		return errors.Join(fmt.Errorf("charge ride %d: %w", r.ride.ID, chargeErr), err)
	}
	if n >= r.maxChargeAttempts {
		field, value := chargeMatch(r.key)
		return r.setAside(ctx, fmt.Sprintf("charge outcome still unknown after %d attempts; check Stripe for metadata %s=%s (idempotency_key_id=%d)",
			n, field, value, r.key.ID))
	}
	return fmt.Errorf("charge ride %d (unknown outcome %d of %d): %w", r.ride.ID, n, r.maxChargeAttempts, chargeErr)
}

// keyConflict sets the request aside when Stripe refused its charge
// because the Stripe key was first used with other parameters
// (chargeErr). The request's Stripe key comes from the client's key
// alone, so this is the same key sent for another request: a client that
// reused its key after the database lost the first request's row, or a
// change to what the charge sends. A charge may exist under the key;
// charging under another one could take the money twice, so a person
// looks first, shown the charge the key's metadata finds.
func (r *request) keyConflict(ctx context.Context, chargeErr error) error {
	field, value := chargeMatch(r.key)
	found := "no succeeded charge found"
	chargeID, ok, err := r.payments.FindCharge(ctx, r.user.StripeCustomerID, field, value, r.key.CreatedAt.Add(-r.stripeRetention))
	switch {
	case err != nil:
		found = "charges not looked up: " + err.Error()
	case ok:
		found = "charge " + chargeID
	}
	r.logger.WarnContext(ctx, "Stripe refused the charge's idempotency key as used with other parameters",
		slog.Int64("idempotency_key_id", r.key.ID),
		slog.String("stripe_idempotency_key", StripeKey(r.key)),
		slog.Any("error", chargeErr))
	return r.setAside(ctx, fmt.Sprintf("Stripe refused the charge: its Stripe key was first used with other parameters; %s (metadata %s=%s)",
		found, field, value))
}

// checkReplay returns nil when the charge Stripe replayed is this
// request's to record: the metadata it holds is what this request sends,
// and no other ride records it. Otherwise the request is set aside,
// naming the charge.
func (r *request) checkReplay(ctx context.Context, charge payment.Created) error {
	for k, want := range r.chargeRequest().Metadata {
		if got := charge.Metadata[k]; got != want {
			return r.setAside(ctx, fmt.Sprintf("Stripe replayed charge %s, whose metadata %s is not this request's",
				charge.ID, k))
		}
	}
	other, err := rideByCharge(ctx, r.pool, charge.ID)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return fmt.Errorf("look for another ride recording charge %s: %w", charge.ID, err)
	case other.ID != r.ride.ID:
		return r.setAside(ctx, fmt.Sprintf("Stripe replayed charge %s, which ride %d already records",
			charge.ID, other.ID))
	}
	r.logger.InfoContext(ctx, "Recording the charge Stripe replayed for this request",
		slog.Int64("idempotency_key_id", r.key.ID),
		slog.Int64("ride_id", r.ride.ID),
		slog.String("charge_id", charge.ID))
	return nil
}

// maxReason is the longest reason idempotency_keys.attention_reason
// holds, in characters; a longer one, which a long client key can make,
// is cut.
const maxReason = 500

// setAside flags the request's key for a human, for reason, and moves its
// ride to needs_review in the same atomic phase, so that the ride never
// says pending about a key nobody works. The key stays at ride_created,
// resumable once someone has checked Stripe and cleared the flag; until
// then every retry gets idem.ErrNeedsAttention without calling Stripe.
func (r *request) setAside(ctx context.Context, reason string) error {
	if runes := []rune(reason); len(runes) > maxReason {
		reason = string(runes[:maxReason-1]) + "…"
	}
	r.logger.ErrorContext(ctx, "Setting idempotency key aside for human attention",
		slog.Int64("idempotency_key_id", r.key.ID),
		slog.Int64("user_id", r.user.ID),
		slog.Int64("ride_id", r.ride.ID),
		slog.String("reason", reason))
	if err := r.keys.Phase(ctx, r.key, func(_ context.Context, tx *idem.Tx) error {
		tx.Move(idem.SetAside(reason))
		settleRide(tx, r.ride.ID, StatusNeedsReview)
		return nil
	}); err != nil {
		return err
	}
	return fmt.Errorf("key %d: %w", r.key.ID, idem.ErrNeedsAttention)
}
