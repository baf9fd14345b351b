package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
	"github.com/rocketrides/rocketrides/internal/user"
)

// TestRememberedUser holds the user the api remembers for a token, to
// spare a claim the token's look-up, to what a look-up would find: a
// token that changed hands since is served as whoever holds it now.
func TestRememberedUser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	type testBundle struct{ stack *apitest.Stack }
	setup := func(t *testing.T) testBundle {
		t.Helper()
		b := apitest.New(t, apitest.Options{})
		// The first ride looks the token up, and the api remembers its
		// user.
		require.Equal(t, http.StatusCreated, b.PostRide(t, apitest.NewKey(), apitest.DefaultParams).Status)
		return testBundle{stack: b}
	}

	t.Run("RefusesARevokedToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := user.Upsert(ctx, b.stack.Pool, b.stack.User.Email, b.stack.User.StripeCustomerID, "tok-"+apitest.NewKey())
		require.NoError(t, err)

		key := apitest.NewKey()
		require.Equal(t, http.StatusUnauthorized, b.stack.PostRide(t, key, apitest.DefaultParams).Status)
		require.Zero(t, b.stack.Count(t, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1`, key))
		// Refused as a bad token before anything about the request is
		// looked at, as though it had never been remembered.
		require.Equal(t, http.StatusUnauthorized, b.stack.PostRide(t, apitest.NewKey(), "origin_lat=x").Status)
	})

	t.Run("ServesWhoeverHoldsTheTokenNow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := user.Upsert(ctx, b.stack.Pool, b.stack.User.Email, b.stack.User.StripeCustomerID, "tok-"+apitest.NewKey())
		require.NoError(t, err)
		other, err := user.Upsert(ctx, b.stack.Pool, b.stack.BadSourceUser.Email, b.stack.BadSourceUser.StripeCustomerID, b.stack.Token)
		require.NoError(t, err)

		// The token is the other user's now, whose card is declined.
		key := apitest.NewKey()
		require.Equal(t, http.StatusPaymentRequired, b.stack.PostRide(t, key, apitest.DefaultParams).Status)
		require.Equal(t, 1, b.stack.Count(t, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1 AND user_id = $2`, key, other.ID))
	})
}
