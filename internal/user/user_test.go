package user_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/user"
)

func TestUpsert(t *testing.T) {
	t.Parallel()

	// A second seed with the customer Stripe kept writes nothing, and
	// still returns the user (it used to return ErrNotFound).
	t.Run("SameValuesReturnTheUser", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.New(t)
		ctx := t.Context()
		first, err := user.Upsert(ctx, pool, "user@example.com", "cus_1", "token-1")
		require.NoError(t, err)
		again, err := user.Upsert(ctx, pool, "user@example.com", "cus_1", "token-1")
		require.NoError(t, err)
		require.Equal(t, first, again)

		changed, err := user.Upsert(ctx, pool, "user@example.com", "cus_2", "token-1")
		require.NoError(t, err)
		require.Equal(t, first.ID, changed.ID)
		require.Equal(t, "cus_2", changed.StripeCustomerID)
	})
}
