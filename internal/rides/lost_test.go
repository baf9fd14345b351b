package rides_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

// TestLostRow: the database loses a request's commits (a failover to a
// standby that did not have them, a split brain rewound, a restore from
// backup) after Stripe charged for it. The client's retry makes a new row,
// and because the Stripe request comes from the client's request alone, it
// gets the first charge back instead of a second one. Where Stripe's
// answer cannot be this request's, the request is set aside for a person
// and nothing is charged again.
func TestLostRow(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		*apitest.Stack
		key string
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		b := &testBundle{Stack: apitest.New(t, apitest.Options{}), key: apitest.NewKey()}
		require.Equal(t, http.StatusCreated, b.PostRide(t, b.key, apitest.DefaultParams).Status)
		require.Len(t, b.Stripe.Charges(), 1)
		return b
	}
	// lose deletes what the request committed, as a database that lost
	// its commits would not have it: the key, and with rideToo its ride,
	// the ride's audit record and its staged receipt.
	lose := func(t *testing.T, b *testBundle, rideToo bool) {
		t.Helper()
		ctx := context.Background()
		if rideToo {
			for _, sql := range []string{
				`DELETE FROM staged_jobs`,
				`DELETE FROM audit_records`,
				`DELETE FROM rides`,
			} {
				_, err := b.Pool.Exec(ctx, sql)
				require.NoError(t, err)
			}
		}
		_, err := b.Pool.Exec(ctx, `DELETE FROM idempotency_keys`)
		require.NoError(t, err)
	}

	t.Run("RetryGetsTheFirstChargeBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first := b.Stripe.Charges()[0]
		lose(t, b, true)

		resp := b.PostRide(t, b.key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		require.Equal(t, first.ID, resp.JSON(t)["stripe_charge_id"], "the charge Stripe made the first time")
		require.Len(t, b.Stripe.Charges(), 1, "no second charge")
		require.Len(t, b.ChargesFor(b.KeyRow(t, b.key).ID), 1)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides WHERE stripe_charge_id = $1`, first.ID))
	})

	// The client reused its key for another ride after the database lost
	// the first: Stripe refuses the key, and a person looks.
	t.Run("KeyUsedForOtherParametersIsSetAside", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first := b.Stripe.Charges()[0]
		lose(t, b, true)

		resp := b.PostRide(t, b.key, "origin_lat=1&origin_lon=2&target_lat=3&target_lon=4")
		require.Equal(t, http.StatusBadGateway, resp.Status, "%s", resp.Body)
		require.Equal(t, "payment_needs_review", resp.JSON(t)["code"])
		require.Len(t, b.Stripe.Charges(), 1, "nothing charged under another key")
		row := b.KeyRow(t, b.key)
		require.NotNil(t, row.AttentionReason)
		require.Contains(t, *row.AttentionReason, "used with other parameters")
		require.Contains(t, *row.AttentionReason, first.ID, "the reason names the charge")
		require.Equal(t, idem.RecoveryPoint("ride_created"), row.RecoveryPoint)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides WHERE status = 'needs_review'`))

		// Retries are refused without asking Stripe again.
		again := b.PostRide(t, b.key, "origin_lat=1&origin_lon=2&target_lat=3&target_lon=4")
		require.Equal(t, http.StatusBadGateway, again.Status, "%s", again.Body)
		require.Len(t, b.Stripe.Charges(), 1)
	})

	// Only the key was lost; its ride kept the charge. The charge Stripe
	// replays to the retry is another ride's: recording it would make two
	// rides of one payment, so a person looks.
	t.Run("ReplayedChargeAnotherRideRecordsIsSetAside", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first := b.Stripe.Charges()[0]
		lose(t, b, false)

		resp := b.PostRide(t, b.key, apitest.DefaultParams)
		require.Equal(t, http.StatusBadGateway, resp.Status, "%s", resp.Body)
		require.Equal(t, "payment_needs_review", resp.JSON(t)["code"])
		row := b.KeyRow(t, b.key)
		require.NotNil(t, row.AttentionReason)
		require.Contains(t, *row.AttentionReason, "replayed charge "+first.ID)
		require.Len(t, b.Stripe.Charges(), 1)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides WHERE stripe_charge_id = $1`, first.ID))
	})
}
