package rides_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/rides"
)

func TestStripeKey(t *testing.T) {
	t.Parallel()

	// The id alone can name two requests once a failover has lost one;
	// the identity cannot (idempotency_keys.identity).
	t.Run("CarriesTheKeysIdentity", func(t *testing.T) {
		t.Parallel()
		identity := uuid.MustParse("0b1f3c1e-6f0a-4c1d-9d55-2c4f0e8a9b7d")
		require.Equal(t, "rocket-rides-42-0b1f3c1e-6f0a-4c1d-9d55-2c4f0e8a9b7d",
			rides.StripeKey(&idem.Key{ID: 42, Identity: &identity}))
	})

	t.Run("DiffersForTheSameIDWithAnotherIdentity", func(t *testing.T) {
		t.Parallel()
		a, b := uuid.New(), uuid.New()
		require.NotEqual(t, rides.StripeKey(&idem.Key{ID: 42, Identity: &a}), rides.StripeKey(&idem.Key{ID: 42, Identity: &b}))
	})

	// A key created before identities existed may have its charge at
	// Stripe under the old key already: it keeps it.
	t.Run("KeepsTheOldFormWithoutAnIdentity", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "rocket-rides-42", rides.StripeKey(&idem.Key{ID: 42}))
	})
}
