package rides_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

// A person settles what the system set aside for them, through the same
// phases and fences as every request.
func TestSettle(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		*apitest.Stack
		console *rides.Service
		key     string
		keyID   int64
	}
	// setup flags a ride's key through the unknown-outcome path: Stripe
	// stores a 500 against the charge's idempotency key and the one
	// attempt allowed uses up the budget.
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		b := &testBundle{Stack: apitest.New(t, apitest.Options{MaxChargeAttempts: 1})}
		b.Stripe.SetFaults(fakestripe.Faults{StoreFailureNext: 1})
		b.key = apitest.NewKey()
		resp := b.PostRide(t, b.key, apitest.DefaultParams)
		require.Equal(t, http.StatusBadGateway, resp.Status, "%s", resp.Body)
		require.Equal(t, "payment_needs_review", resp.JSON(t)["code"])
		b.keyID = b.KeyRow(t, b.key).ID
		keys, err := idem.New(&idem.Config{Pool: b.Pool, Actor: "console"})
		require.NoError(t, err)
		b.console, err = rides.NewService(&rides.ServiceConfig{Pool: b.Pool, Keys: keys, Payments: b.Gateway})
		require.NoError(t, err)
		return b
	}
	settlement := func(b *testBundle) rides.Settlement {
		return rides.Settlement{KeyID: b.keyID, Operator: "ada", OriginIP: netip.MustParseAddr("192.0.2.7")}
	}
	// chargeAtStripe makes a charge Stripe "did" make for the request:
	// its metadata names the request, as the request's own would, under
	// Stripe key suffix.
	chargeAtStripe := func(t *testing.T, b *testBundle, suffix string) string {
		t.Helper()
		key := b.KeyRow(t, b.key)
		var params rides.Params
		require.NoError(t, json.Unmarshal(key.RequestParams, &params))
		charge, err := b.Gateway.Charge(context.Background(), payment.ChargeRequest{
			Customer: b.User.StripeCustomerID, Amount: rides.Price, Currency: rides.Currency,
			Metadata:       rides.ChargeRequest(b.User, key, params).Metadata,
			IdempotencyKey: "settle-test-" + strconv.FormatInt(b.keyID, 10) + suffix,
		})
		require.NoError(t, err)
		return charge.ID
	}
	ride := func(t *testing.T, b *testBundle) (status string, charge *string) {
		t.Helper()
		require.NoError(t, b.Pool.QueryRow(context.Background(),
			`SELECT status, stripe_charge_id FROM rides WHERE idempotency_key_id = $1`, b.keyID).Scan(&status, &charge))
		return status, charge
	}
	audited := func(t *testing.T, b *testBundle, action string) {
		t.Helper()
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records
			WHERE action = $1 AND data->>'operator' = 'ada' AND origin_ip = '192.0.2.7'`, action))
	}

	t.Run("AdoptRecordsTheChargeAndFinishesWithA201", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		chargeID := chargeAtStripe(t, b, "")
		adopted, err := b.console.Adopt(context.Background(), settlement(b))
		require.NoError(t, err)
		require.Equal(t, chargeID, adopted)

		status, charge := ride(t, b)
		require.Equal(t, "succeeded", status)
		require.Equal(t, chargeID, *charge)
		row := b.KeyRow(t, b.key)
		require.Equal(t, idem.Finished, row.RecoveryPoint)
		require.Equal(t, http.StatusCreated, *row.ResponseCode)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM staged_jobs WHERE job_args->>'stripe_charge_id' = $1`, chargeID))
		audited(t, b, rides.ActionChargeAdopted)
		require.Len(t, b.ChargesFor(b.keyID), 1, "no second charge")

		// The client's retry now replays the 201.
		resp := b.PostRide(t, b.key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		require.Equal(t, chargeID, resp.JSON(t)["stripe_charge_id"])

		steps, err := b.Keys.Steps(context.Background(), b.keyID)
		require.NoError(t, err)
		last := steps[len(steps)-1]
		require.Equal(t, idem.StepReached, last.Event)
		require.Equal(t, idem.Finished, last.RecoveryPoint)
		require.Equal(t, "console", last.Actor)
	})

	t.Run("AdoptRefusedWithoutACharge", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.console.Adopt(context.Background(), settlement(b))
		require.ErrorIs(t, err, rides.ErrNoCharge)
		status, _ := ride(t, b)
		require.Equal(t, "needs_review", status)
		row := b.KeyRow(t, b.key)
		require.Nil(t, row.LockedAt, "the key is released as it stood")
		require.Equal(t, rides.RideCreated, row.RecoveryPoint)
	})

	t.Run("AdoptRefusedWithTwoCharges", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		chargeAtStripe(t, b, "")
		chargeAtStripe(t, b, "-second")
		_, err := b.console.Adopt(context.Background(), settlement(b))
		require.ErrorIs(t, err, rides.ErrSeveralCharges)
	})

	// After a failover lost a key, its id can come back on another
	// request; that request's charge names the same id but another
	// identity, and is not this request's to adopt.
	t.Run("AdoptIgnoresAChargeOfAnotherRequestWithTheSameKeyID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.Gateway.Charge(context.Background(), payment.ChargeRequest{
			Customer: b.User.StripeCustomerID, Amount: rides.Price, Currency: rides.Currency,
			Metadata: map[string]string{"idempotency_key_id": strconv.FormatInt(b.keyID, 10),
				"idempotency_key_identity": "00000000-0000-4000-8000-000000000000"},
			IdempotencyKey: "settle-test-lost-" + strconv.FormatInt(b.keyID, 10),
		})
		require.NoError(t, err)
		_, err = b.console.Adopt(context.Background(), settlement(b))
		require.ErrorIs(t, err, rides.ErrNoCharge)
		require.NoError(t, b.console.CloseFailed(context.Background(), settlement(b)))
	})

	t.Run("ReleaseLetsTheNextAttemptCharge", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, b.console.Release(context.Background(), settlement(b)))
		status, _ := ride(t, b)
		require.Equal(t, "pending", status)
		audited(t, b, rides.ActionReleased)

		// Stripe still replays its stored 500 to this key; with a fresh
		// budget of one the retry is set aside again rather than looping.
		resp := b.PostRide(t, b.key, apitest.DefaultParams)
		require.Equal(t, http.StatusBadGateway, resp.Status, "%s", resp.Body)
		require.Equal(t, 2, b.Stripe.Stats().ChargeRequests, "the released key was tried again")
	})

	t.Run("ReleaseRefusedWhenStripeHoldsACharge", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		chargeAtStripe(t, b, "")
		require.ErrorIs(t, b.console.Release(context.Background(), settlement(b)), rides.ErrChargeFound)
		status, _ := ride(t, b)
		require.Equal(t, "needs_review", status)
	})

	t.Run("CloseFailedStoresAFailure", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, b.console.CloseFailed(context.Background(), settlement(b)))
		status, charge := ride(t, b)
		require.Equal(t, "failed", status)
		require.Nil(t, charge)
		audited(t, b, rides.ActionClosedFailed)
		resp := b.PostRide(t, b.key, apitest.DefaultParams)
		require.Equal(t, http.StatusBadGateway, resp.Status, "%s", resp.Body)
		require.Equal(t, "payment_rejected", resp.JSON(t)["code"])
		require.Empty(t, b.ChargesFor(b.keyID))
	})

	t.Run("CloseFailedRefusedWhenStripeHoldsACharge", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		chargeAtStripe(t, b, "")
		require.ErrorIs(t, b.console.CloseFailed(context.Background(), settlement(b)), rides.ErrChargeFound)
		require.Equal(t, rides.RideCreated, b.KeyRow(t, b.key).RecoveryPoint)
	})

	t.Run("RefusedWhileAnotherHoldsTheKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.Keys.ClaimByID(context.Background(), b.keyID, nil)
		require.NoError(t, err)
		require.ErrorIs(t, b.console.CloseFailed(context.Background(), settlement(b)), idem.ErrInFlight)
		_, err = b.console.Adopt(context.Background(), settlement(b))
		require.ErrorIs(t, err, idem.ErrInFlight)
		require.ErrorIs(t, b.console.Release(context.Background(), settlement(b)), idem.ErrInFlight)
		require.Zero(t, b.Count(t, `SELECT count(*) FROM audit_records WHERE data->>'operator' = 'ada'`))
	})

	t.Run("RefusedOnAKeyNotSetAside", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		other := apitest.NewKey()
		require.Equal(t, http.StatusCreated, b.PostRide(t, other, apitest.DefaultParams).Status)
		st := settlement(b)
		st.KeyID = b.KeyRow(t, other).ID
		require.ErrorIs(t, b.console.Release(context.Background(), st), idem.ErrKeyFinished)

		b.Fail(rides.FailBeforeCharge, func(context.Context) error { return rides.ErrSimulated })
		pending := apitest.NewKey()
		require.Equal(t, http.StatusInternalServerError, b.PostRide(t, pending, apitest.DefaultParams).Status)
		st.KeyID = b.KeyRow(t, pending).ID
		before := b.KeyRow(t, pending)
		require.ErrorIs(t, b.console.CloseFailed(context.Background(), st), rides.ErrNotSetAside)
		after := b.KeyRow(t, pending)
		require.Nil(t, after.LockedAt)
		require.Equal(t, before.Claims, after.Claims, "a refused settlement claims nothing")
	})

	t.Run("RefusedWithoutAnOperator", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		st := settlement(b)
		for _, name := range []string{" ", "ada\x00", "ada\u202e", strings.Repeat("a", rides.MaxOperatorLength+1), "\xff"} {
			st.Operator = name
			require.ErrorIs(t, b.console.Release(context.Background(), st), rides.ErrInvalidSettlement, "%q", name)
		}
		st.Operator, st.OriginIP = "ada", netip.Addr{}
		require.ErrorIs(t, b.console.Release(context.Background(), st), rides.ErrInvalidSettlement)
		require.Equal(t, "needs_review", func() string { s, _ := ride(t, b); return s }())
		require.Equal(t, 1, b.KeyRow(t, b.key).Claims, "nothing claimed")
	})
}
