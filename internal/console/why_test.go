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

	// The charge carries rides.StripeKey: the key's id and its identity,
	// or the id alone for a key from before identities.
	t.Run("ChargeNamesTheStripeKeyWithItsIdentity", func(t *testing.T) {
		t.Parallel()
		identity := uuid.New()
		w := why(reached(rides.ChargeCreated), &idem.Key{ID: 7, Identity: &identity})
		require.Contains(t, w.Text, "rocket-rides-<key id>-<key identity>")
		require.Contains(t, w.Text, "rocket-rides-7-"+identity.String())
		w = why(reached(rides.ChargeCreated), &idem.Key{ID: 7})
		require.Contains(t, w.Text, "(here rocket-rides-7)")
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
}
