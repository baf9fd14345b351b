package rides_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

// The third state of a foreign call: it may or may not have happened.
func TestAmbiguousStripeOutcomes(t *testing.T) {
	t.Parallel()

	const retention = 1500 * time.Millisecond

	// Once Stripe has forgotten the idempotency key, a blind retry would
	// charge again. The retry must ask Stripe first.
	t.Run("PastRetentionAdoptsExistingCharge", func(t *testing.T) {
		t.Parallel()
		b := apitest.New(t, apitest.Options{StripeRetries: new(int64), StripeKeyRetention: retention})
		key := apitest.NewKey()
		b.Stripe.SetFaults(fakestripe.Faults{DropAfterCommitNext: 1})
		require.Equal(t, http.StatusServiceUnavailable, b.PostRide(t, key, apitest.DefaultParams).Status)
		row := b.KeyRow(t, key)
		require.Len(t, b.ChargesFor(row.ID), 1)

		time.Sleep(retention) // our side: the first attempt is now old
		b.Stripe.Advance(2 * retention)

		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		charges := b.ChargesFor(row.ID)
		require.Len(t, charges, 1, "the charge was adopted, not made again")
		require.Equal(t, charges[0].ID, resp.JSON(t)["stripe_charge_id"])
	})

	t.Run("PastRetentionChargesWhenNoneExists", func(t *testing.T) {
		t.Parallel()
		b := apitest.New(t, apitest.Options{StripeRetries: new(int64), StripeKeyRetention: retention})
		key := apitest.NewKey()
		b.Stripe.SetFaults(fakestripe.Faults{FailNext: 1, FailStatus: http.StatusInternalServerError})
		require.Equal(t, http.StatusServiceUnavailable, b.PostRide(t, key, apitest.DefaultParams).Status)
		row := b.KeyRow(t, key)
		require.Empty(t, b.ChargesFor(row.ID))

		time.Sleep(retention)
		b.Stripe.Advance(2 * retention)

		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		require.Len(t, b.ChargesFor(row.ID), 1)
	})

	// An outage is not an unknown outcome: Stripe never stored anything,
	// so however long it lasts, the key is not set aside.
	t.Run("OutageDoesNotUseUpTheBudget", func(t *testing.T) {
		t.Parallel()
		b := apitest.New(t, apitest.Options{MaxChargeAttempts: 2, StripeRetries: new(int64)})
		key := apitest.NewKey()
		b.Stripe.SetFaults(fakestripe.Faults{FailNext: 4, FailStatus: http.StatusServiceUnavailable})
		for range 4 {
			require.Equal(t, http.StatusServiceUnavailable, b.PostRide(t, key, apitest.DefaultParams).Status)
		}
		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	})

	t.Run("WithinRetentionDoesNotLookUp", func(t *testing.T) {
		t.Parallel()
		b := apitest.New(t, apitest.Options{StripeRetries: new(int64)})
		key := apitest.NewKey()
		b.Stripe.SetFaults(fakestripe.Faults{DropAfterCommitNext: 1})
		require.Equal(t, http.StatusServiceUnavailable, b.PostRide(t, key, apitest.DefaultParams).Status)
		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		require.Equal(t, 1, b.Stripe.Stats().Replays, "resolved by Stripe's own idempotency")
	})

	// Stripe stored a 500 for the key and replays it on every retry: the
	// charge may or may not exist, and asking again cannot tell. After a
	// bounded number of attempts the key is set aside for a human.
	t.Run("ReplayedErrorIsSetAsideAfterBoundedAttempts", func(t *testing.T) {
		t.Parallel()
		b := apitest.New(t, apitest.Options{MaxChargeAttempts: 3})
		key := apitest.NewKey()
		b.Stripe.SetFaults(fakestripe.Faults{StoreFailureNext: 1})

		for attempt := 1; attempt <= 2; attempt++ {
			resp := b.PostRide(t, key, apitest.DefaultParams)
			require.Equal(t, http.StatusServiceUnavailable, resp.Status, "attempt %d: %s", attempt, resp.Body)
		}
		// The third replayed 500 uses up the budget.
		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusBadGateway, resp.Status, "%s", resp.Body)
		require.Equal(t, "payment_needs_review", resp.JSON(t)["code"])
		requests := b.Stripe.Stats().ChargeRequests
		require.Equal(t, 3, requests)

		var reason *string
		require.NoError(t, b.Pool.QueryRow(context.Background(),
			`SELECT attention_reason FROM idempotency_keys WHERE id = $1`, b.KeyRow(t, key).ID).Scan(&reason))
		require.NotNil(t, reason)
		require.Contains(t, *reason, "idempotency_key_id=")

		again := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusBadGateway, again.Status)
		require.Equal(t, requests, b.Stripe.Stats().ChargeRequests, "no further Stripe call")
		row := b.KeyRow(t, key)
		require.Equal(t, rides.RideCreated, row.RecoveryPoint, "still resumable once a human settles it")
		require.Nil(t, row.LockedAt)
	})
}
