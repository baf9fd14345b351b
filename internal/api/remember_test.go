package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/ratelimit"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/user"
)

// TestRememberedUser holds the user the api remembers for a token, to
// spare a claim the token's look-up, to what a look-up would find: a
// token that changed hands since is served as whoever holds it now. With
// the rate limits on as without them, and a revoked token's 401 is
// counted against its address as any other.
func TestRememberedUser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// limitsOn are limits that a test does not reach, but for its
	// failures: the limits' clock stands still, so a request's counts stay
	// in memory after the first sync, and which requests need Postgres
	// does not depend on the test's pace.
	stopped := time.Now()
	limitsOn := apitest.Options{
		TokenLimit:      ratelimit.Policy{Name: ratelimit.TokenPolicy, Quota: 1000, Window: time.Hour},
		FailedAuthLimit: ratelimit.Policy{Name: ratelimit.FailedAuthPolicy, Quota: 2, Window: time.Hour},
		RateLimitNow:    func() time.Time { return stopped },
	}
	type testBundle struct {
		stack *apitest.Stack
		trips *dbtest.RoundTrips
	}
	setup := func(t *testing.T, opts apitest.Options) testBundle {
		t.Helper()
		var trips *dbtest.RoundTrips
		opts.Pool, trips = dbtest.NewCounted(t, 0)
		b := apitest.New(t, opts)
		// The first ride looks the token up, and the api remembers its
		// user.
		require.Equal(t, http.StatusCreated, b.PostRide(t, apitest.NewKey(), apitest.DefaultParams).Status)
		return testBundle{stack: b, trips: trips}
	}

	plain := limitsOn
	plain.Plain = true
	for _, c := range []struct {
		name string
		opts apitest.Options
		// The round trips of a new ride and of a replay: on the key
		// store's plain path, one a statement.
		newRide, replay int64
	}{{"LimitsOff", apitest.Options{}, 3, 1}, {"LimitsOn", limitsOn, 3, 1}, {"LimitsOnPlainPath", plain, 21, 5}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()

			t.Run("SparesANewRideAndAReplayTheLookUp", func(t *testing.T) {
				t.Parallel()
				b := setup(t, c.opts)
				key := apitest.NewKey()
				b.trips.Reset()
				require.Equal(t, http.StatusCreated, b.stack.PostRide(t, key, apitest.DefaultParams).Status)
				require.Equal(t, c.newRide, b.trips.Total(),
					"a new ride: the claim with the token's check, the ride, the charge and the finish")
				b.trips.Reset()
				replay := b.stack.PostRide(t, key, apitest.DefaultParams)
				require.Equal(t, http.StatusCreated, replay.Status)
				require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
				require.Equal(t, c.replay, b.trips.Total(), "a replay: the claim with the token's check")
			})

			t.Run("RefusesARevokedToken", func(t *testing.T) {
				t.Parallel()
				b := setup(t, c.opts)
				_, err := user.Upsert(ctx, b.stack.Pool, b.stack.User.Email, b.stack.User.StripeCustomerID, "tok-"+apitest.NewKey())
				require.NoError(t, err)

				key := apitest.NewKey()
				require.Equal(t, http.StatusUnauthorized, b.stack.PostRide(t, key, apitest.DefaultParams).Status)
				require.Zero(t, b.stack.Count(t, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1`, key))
				// Refused as a bad token before anything about the request is
				// looked at, as though it had never been remembered.
				require.Equal(t, http.StatusUnauthorized, b.stack.PostRide(t, apitest.NewKey(), "origin_lat=x").Status)
				if c.opts.FailedAuthLimit.On() {
					// Both failures counted, the remembered one too: the
					// address is refused now, even with a valid token.
					resp := b.stack.Do(t, http.MethodGet, "/rides", "", "Authorization", "Bearer "+b.stack.BadSourceToken)
					require.Equal(t, http.StatusTooManyRequests, resp.Status, "%s", resp.Body)
				}
			})

			t.Run("ServesWhoeverHoldsTheTokenNow", func(t *testing.T) {
				t.Parallel()
				b := setup(t, c.opts)
				_, err := user.Upsert(ctx, b.stack.Pool, b.stack.User.Email, b.stack.User.StripeCustomerID, "tok-"+apitest.NewKey())
				require.NoError(t, err)
				other, err := user.Upsert(ctx, b.stack.Pool, b.stack.BadSourceUser.Email, b.stack.BadSourceUser.StripeCustomerID, b.stack.Token)
				require.NoError(t, err)

				// The token is the other user's now, whose card is declined.
				key := apitest.NewKey()
				require.Equal(t, http.StatusPaymentRequired, b.stack.PostRide(t, key, apitest.DefaultParams).Status)
				require.Equal(t, 1, b.stack.Count(t, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1 AND user_id = $2`, key, other.ID))
			})
		})
	}
}
