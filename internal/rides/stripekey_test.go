package rides_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/user"
)

func TestStripeKey(t *testing.T) {
	t.Parallel()

	// The user and the client's Idempotency-Key, hashed: nothing the
	// database drew, so a retry after the row was lost sends the same key.
	t.Run("ComesFromTheUserAndTheClientsKey", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "rocket-rides-7-2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
			rides.StripeKey(&idem.Key{ID: 42, UserID: 7, IdempotencyKey: "hello"}))
	})

	t.Run("IsTheSameForAnyRowOfTheRequest", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, rides.StripeKey(&idem.Key{ID: 42, UserID: 7, IdempotencyKey: "k"}),
			rides.StripeKey(&idem.Key{ID: 43, UserID: 7, IdempotencyKey: "k"}))
	})

	t.Run("DiffersForAnotherUserOrKey", func(t *testing.T) {
		t.Parallel()
		k := rides.StripeKey(&idem.Key{UserID: 7, IdempotencyKey: "k"})
		require.NotEqual(t, k, rides.StripeKey(&idem.Key{UserID: 8, IdempotencyKey: "k"}))
		require.NotEqual(t, k, rides.StripeKey(&idem.Key{UserID: 7, IdempotencyKey: "l"}))
	})

	// Stripe's limit is 255 characters; a client's key may be 255 itself.
	t.Run("FitsStripesLimitForTheLongestClientKey", func(t *testing.T) {
		t.Parallel()
		long := make([]byte, 255)
		for i := range long {
			long[i] = 'x'
		}
		require.LessOrEqual(t, len(rides.StripeKey(&idem.Key{UserID: 1<<63 - 1, IdempotencyKey: string(long)})), 255)
	})

	// A key made while the Stripe key came from the row keeps the one its
	// charge may already be held under.
	t.Run("KeepsTheRowsKeyForAKeyWithAnIdentity", func(t *testing.T) {
		t.Parallel()
		identity := uuid.MustParse("0b1f3c1e-6f0a-4c1d-9d55-2c4f0e8a9b7d")
		require.Equal(t, "rocket-rides-42-0b1f3c1e-6f0a-4c1d-9d55-2c4f0e8a9b7d",
			rides.StripeKey(&idem.Key{ID: 42, UserID: 7, IdempotencyKey: "k", Identity: &identity}))
	})
}

func TestChargeRequest(t *testing.T) {
	t.Parallel()

	u := user.User{ID: 7, StripeCustomerID: "cus_7"}
	p := rides.Params{OriginLat: 1.5, OriginLon: 2, TargetLat: -3.25, TargetLon: 4}

	// Every parameter Stripe compares is a function of the client's
	// request: two rows of one request send the same charge.
	t.Run("IsTheSameForAnyRowOfTheRequest", func(t *testing.T) {
		t.Parallel()
		a := rides.ChargeRequest(u, &idem.Key{ID: 1, UserID: 7, IdempotencyKey: "k"}, p)
		b := rides.ChargeRequest(u, &idem.Key{ID: 99, UserID: 7, IdempotencyKey: "k"}, p)
		require.Equal(t, a, b)
		require.Equal(t, int64(rides.Price), a.Amount)
		require.Equal(t, "cus_7", a.Customer)
		require.Equal(t, `{"origin_lat":1.5,"origin_lon":2,"target_lat":-3.25,"target_lon":4}`, a.Metadata[rides.MetadataRequestParams])
		require.NotContains(t, a.Metadata, rides.MetadataRideID)
	})

	t.Run("DiffersForOtherParameters", func(t *testing.T) {
		t.Parallel()
		key := &idem.Key{UserID: 7, IdempotencyKey: "k"}
		other := p
		other.TargetLon = 5
		require.NotEqual(t, rides.ChargeRequest(u, key, p).Metadata[rides.MetadataRequestSHA256],
			rides.ChargeRequest(u, key, other).Metadata[rides.MetadataRequestSHA256])
	})
}
