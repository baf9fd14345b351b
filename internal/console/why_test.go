package console

import (
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/rides"
)

// The story's sentences say what today's code does.
func TestWhy(t *testing.T) {
	t.Parallel()

	reached := func(point idem.RecoveryPoint) idem.Step {
		return idem.Step{Event: idem.StepReached, RecoveryPoint: point}
	}
	status := func(code int) *idem.Key { return &idem.Key{ID: 7, ResponseCode: &code, RecoveryPoint: idem.Finished} }

	// The charge carries rides.StripeKey: the user and the client's key,
	// hashed; or, for a key from before, its id and identity.
	t.Run("ChargeNamesTheStripeKey", func(t *testing.T) {
		t.Parallel()
		w := why(reached(rides.ChargeCreated), &idem.Key{ID: 7, UserID: 3, IdempotencyKey: "hello"})
		require.Contains(t, w.Text, "rocket-rides-<user id>-<SHA-256 of the client's key>")
		require.Contains(t, w.Text, "(here rocket-rides-3-2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824)")
		identity := uuid.New()
		w = why(reached(rides.ChargeCreated), &idem.Key{ID: 7, Identity: &identity})
		require.Contains(t, w.Text, "(here rocket-rides-7-"+identity.String()+")")
	})

	// A receipt is staged only by the phase that finishes a charged ride
	// (rides' stageReceipt); a declined or failed ride is settled without
	// one.
	t.Run("OnlyACreatedRideClaimsAReceipt", func(t *testing.T) {
		t.Parallel()
		require.Contains(t, why(reached(idem.Finished), status(http.StatusCreated)).Text, "receipt staged as a job in the same transaction")
		for _, code := range []int{http.StatusPaymentRequired, http.StatusBadGateway, http.StatusUnprocessableEntity} {
			text := why(reached(idem.Finished), status(code)).Text
			require.NotContains(t, text, "receipt staged", "status %d", code)
			require.Contains(t, text, "o receipt is staged", "status %d", code)
		}
		require.Contains(t, why(reached(idem.Finished), status(http.StatusPaymentRequired)).Text, "declined")
	})

	// The answer-lost lab says who resumed the released key: the client's
	// retry, or the completer when it found the key first, in which case
	// the retry's own window at the fake may hold no request at all.
	t.Run("AnswerLostNamesWhoResumed", func(t *testing.T) {
		t.Parallel()
		const stripeKey = "rocket-rides-7-0b7e0e6c-6c3e-4a52-9a3e-6f1f1b1f3d1e"
		total := stripeCounts{Charges: 1, ChargeRequests: 4, Replays: 3, DroppedAnswers: 3}
		retry := stripeCounts{ChargeRequests: 1, Replays: 1}

		w := answerLostWhy(idem.DefaultActor, retry, total, stripeKey)
		require.Contains(t, w.Text, "The retry resumed at ride_created")
		require.Contains(t, w.Text, "same Stripe idempotency key, "+stripeKey)

		w = answerLostWhy("completer", stripeCounts{}, total, stripeKey)
		require.Contains(t, w.Text, "The completer found the released key before the client's retry did")
		require.Contains(t, w.Text, "same Stripe idempotency key, "+stripeKey)
		require.Contains(t, w.Text, "the retry got the stored answer")

		require.Equal(t, "2 charges made while this ride ran.", answerLostWhy("completer", retry, stripeCounts{Charges: 2, Replays: 1}, stripeKey).Text)
		require.Equal(t, "1 charge made while this ride ran.", answerLostWhy(idem.DefaultActor, stripeCounts{}, total, stripeKey).Text,
			"a retry the fake never heard explains nothing")
	})
}
