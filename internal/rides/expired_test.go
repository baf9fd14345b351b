package rides_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/reaper"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

// TestLateRetry: a retry that comes after its key outlived its lifetime
// (and the reaper deleted it) is never run again, and never charges
// again: it is refused with 410 idempotency_key_expired, naming the ride
// the request made, until the key's record ages out.
func TestLateRetry(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		*apitest.Stack
		reaper *reaper.Reaper
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		stack := apitest.New(t, apitest.Options{})
		r, err := reaper.New(&reaper.Config{
			Keys:   stack.Keys,
			Settle: rides.SettleReaped,
			Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
		})
		require.NoError(t, err)
		return &testBundle{Stack: stack, reaper: r}
	}
	// expire makes every key look older than its lifetime and reaps it.
	expire := func(t *testing.T, b *testBundle) {
		t.Helper()
		_, err := b.Pool.Exec(context.Background(), `
			UPDATE idempotency_keys SET created_at = now() - $1::interval, last_run_at = now() - $1::interval`,
			reaper.DefaultMaxAge+time.Hour)
		require.NoError(t, err)
		reaped, _, err := b.reaper.RunOnce(context.Background())
		require.NoError(t, err)
		require.Positive(t, reaped)
		require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys`))
	}
	requireExpired := func(t *testing.T, resp *apitest.Response) map[string]any {
		t.Helper()
		require.Equal(t, http.StatusGone, resp.Status, "%s", resp.Body)
		body := resp.JSON(t)
		require.Equal(t, "idempotency_key_expired", body["code"])
		require.Empty(t, resp.Header.Get("Idempotent-Replayed"))
		return body
	}
	getStatus := func(t *testing.T, b *testBundle, id any) any {
		t.Helper()
		resp := b.Do(t, http.MethodGet, fmt.Sprintf("/rides/%v", id), "", "Authorization", "Bearer "+b.Token)
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		return resp.JSON(t)["status"]
	}

	t.Run("FinishedRequestIsNotRunAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		first := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
		expire(t, b)

		body := requireExpired(t, b.PostRide(t, key, apitest.DefaultParams))
		require.Equal(t, first.JSON(t)["id"], body["ride_id"])
		require.Contains(t, body["detail"], "GET /rides/")
		require.Equal(t, 1, b.Stripe.Stats().ChargeRequests, "no second charge")
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides`), "no second ride")
		require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys`), "no new key")
		require.Equal(t, "succeeded", getStatus(t, b, body["ride_id"]))

		// However often it comes back.
		requireExpired(t, b.PostRide(t, key, apitest.DefaultParams))
		require.Equal(t, 1, b.Stripe.Stats().ChargeRequests)
	})

	t.Run("DeclinedRequestNamesItsRide", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		post := func() *apitest.Response {
			return b.Do(t, http.MethodPost, "/rides", apitest.DefaultParams,
				"Authorization", "Bearer "+b.BadSourceToken, "Idempotency-Key", key, "Content-Type", formType)
		}
		first := post()
		require.Equal(t, http.StatusPaymentRequired, first.Status, "%s", first.Body)
		expire(t, b)
		body := requireExpired(t, post())
		require.Equal(t, first.JSON(t)["ride_id"], body["ride_id"])
		require.Contains(t, body["detail"], "answered 402")
		require.Equal(t, 1, b.Stripe.Stats().ChargeRequests)
	})

	// A request reaped before it finished is with a person: its ride
	// says needs_review, not pending, and the late retry is told so.
	t.Run("AbandonedRequestsRideNeedsReview", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		b.Fail(rides.FailBeforeCharge, func(context.Context) error { return errors.New("injected failure") })
		failed := b.PostRide(t, key, apitest.DefaultParams)
		b.Fail(rides.FailBeforeCharge, nil)
		require.Equal(t, http.StatusInternalServerError, failed.Status, "%s", failed.Body)
		rideID := failed.JSON(t)["ride_id"]
		require.Equal(t, "pending", getStatus(t, b, rideID))
		expire(t, b)

		require.Equal(t, "needs_review", getStatus(t, b, rideID))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM abandoned_requests`))
		body := requireExpired(t, b.PostRide(t, key, apitest.DefaultParams))
		require.Equal(t, rideID, body["ride_id"])
		require.Contains(t, body["detail"], "never finished")
		require.Zero(t, b.Stripe.Stats().ChargeRequests, "never charged")
	})

	t.Run("RequestWithoutARideSaysSo", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		b.Fail(rides.FailAfterClaim, func(context.Context) error { return errors.New("injected failure") })
		require.Equal(t, http.StatusInternalServerError, b.PostRide(t, key, apitest.DefaultParams).Status)
		b.Fail(rides.FailAfterClaim, nil)
		expire(t, b)
		body := requireExpired(t, b.PostRide(t, key, apitest.DefaultParams))
		require.NotContains(t, body, "ride_id")
		require.Contains(t, body["detail"], "never created a ride")
		require.Zero(t, b.Count(t, `SELECT count(*) FROM rides`))
	})

	// The safe answer to a different request under an expired key is the
	// one it gets while the key lives.
	t.Run("DifferentRequestIsAReusedKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		require.Equal(t, http.StatusCreated, b.PostRide(t, key, apitest.DefaultParams).Status)
		expire(t, b)
		resp := b.PostRide(t, key, "origin_lat=0&origin_lon=0&target_lat=1&target_lon=1")
		require.Equal(t, http.StatusUnprocessableEntity, resp.Status, "%s", resp.Body)
		require.Equal(t, "idempotency_key_reused", resp.JSON(t)["code"])
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides`))
	})

	t.Run("AnotherUsersKeyOfTheSameValueIsIndependent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		require.Equal(t, http.StatusCreated, b.PostRide(t, key, apitest.DefaultParams).Status)
		expire(t, b)
		resp := b.Do(t, http.MethodPost, "/rides", apitest.DefaultParams,
			"Authorization", "Bearer "+b.BadSourceToken, "Idempotency-Key", key, "Content-Type", formType)
		require.Equal(t, http.StatusPaymentRequired, resp.Status, "%s", resp.Body)
	})

	// Once the record ages out the key's value is free: documented, and
	// what a client that waits 30 days gets.
	t.Run("PastTheRecordsRetentionTheKeyIsNew", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		require.Equal(t, http.StatusCreated, b.PostRide(t, key, apitest.DefaultParams).Status)
		expire(t, b)
		_, err := b.Pool.Exec(context.Background(), `UPDATE reaped_keys SET created_at = now() - $1::interval`,
			reaper.DefaultRetainReaped+time.Hour)
		require.NoError(t, err)
		_, _, err = b.reaper.RunOnce(context.Background())
		require.NoError(t, err)
		require.Zero(t, b.Count(t, `SELECT count(*) FROM reaped_keys`))
		// Stripe forgot the Stripe key 29 days before the record went:
		// the same Stripe key makes a new charge.
		b.Stripe.Advance(reaper.DefaultRetainReaped + time.Hour)

		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		require.Equal(t, 2, b.Count(t, `SELECT count(*) FROM rides`))
	})
}
