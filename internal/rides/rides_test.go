package rides_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/platform/problem"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
	"github.com/rocketrides/rocketrides/internal/user"
)

const formType = "application/x-www-form-urlencoded"

func TestCreateRide(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		*apitest.Stack
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{Stack: apitest.New(t, apitest.Options{})}
	}

	// requireOneCharge checks the invariant behind every scenario: the
	// key finished with a 201, exactly one Stripe charge exists for it,
	// made with the derived idempotency key, and the ride records it.
	requireOneCharge := func(t *testing.T, b *testBundle, key string) {
		t.Helper()
		row := b.KeyRow(t, key)
		require.Equal(t, idem.Finished, row.RecoveryPoint)
		require.Equal(t, http.StatusCreated, *row.ResponseCode)
		charges := b.ChargesFor(row.ID)
		require.Len(t, charges, 1, "charges for key %d", row.ID)
		require.EqualValues(t, rides.Price, charges[0].Amount)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides WHERE idempotency_key_id = $1 AND stripe_charge_id = $2`,
			row.ID, charges[0].ID))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM staged_jobs WHERE job_args->>'stripe_charge_id' = $1`, charges[0].ID))
	}

	t.Run("NewKeyCreatesRide", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()

		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		require.Empty(t, resp.Header.Get("Idempotent-Replayed"))
		ride := resp.JSON(t)
		require.InDelta(t, 37.7749, ride["origin_lat"], 1e-9)
		require.InDelta(t, -122.4194, ride["origin_lon"], 1e-9)
		require.InDelta(t, 37.8044, ride["target_lat"], 1e-9)
		require.InDelta(t, -122.2712, ride["target_lon"], 1e-9)
		require.EqualValues(t, rides.Price, ride["amount"])
		require.Equal(t, rides.Currency, ride["currency"])
		require.NotZero(t, ride["id"])

		requireOneCharge(t, b, key)
		row := b.KeyRow(t, key)
		charge := b.ChargesFor(row.ID)[0]
		require.Equal(t, charge.ID, ride["stripe_charge_id"])
		require.Equal(t, b.User.StripeCustomerID, charge.Customer)
		// The charge is the client's request's: who, under which key, for
		// what; nothing the database drew (the ride's id reaches Stripe
		// later, from the reconciler).
		require.Equal(t, map[string]string{
			rides.MetadataUserID:         fmt.Sprint(b.User.ID),
			rides.MetadataIdempotencyKey: key,
			rides.MetadataRequestParams:  `{"origin_lat":37.7749,"origin_lon":-122.4194,"target_lat":37.8044,"target_lon":-122.2712}`,
			rides.MetadataRequestSHA256:  fmt.Sprintf("%x", sha256.Sum256([]byte(`{"origin_lat":37.7749,"origin_lon":-122.4194,"target_lat":37.8044,"target_lon":-122.2712}`))),
		}, charge.Metadata)
		require.Equal(t, "Rocket Rides ride", charge.Description)
		require.Nil(t, row.LockedAt, "a finished key is unlocked")
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'ride.created' AND resource_id = $1 AND origin_ip = '127.0.0.1'`, ride["id"]))
	})

	t.Run("RecordsChargeAndFinishesInOnePipeline", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		// Each phase, or pipeline of phases, takes one connection of the
		// pool, as does the claim.
		acquires := func(key string) int64 {
			before := b.Pool.Stat().AcquireCount()
			resp := b.PostRide(t, key, apitest.DefaultParams)
			require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
			n := b.Pool.Stat().AcquireCount() - before
			requireOneCharge(t, b, key)
			return n
		}
		// The first ride looks the token up; the api then remembers its
		// user, and the rides measured below check it in the claim's round
		// trip (package api, remember.go).
		acquires(apitest.NewKey())
		together := acquires(apitest.NewKey())
		// Armed, the seam between the two phases sends them apart, as a
		// crash test needs them.
		b.Fail(rides.FailAfterChargeCreated, func(context.Context) error { return nil })
		apart := acquires(apitest.NewKey())
		require.Equal(t, apart-1, together, "connections taken by a new ride: %d with the seam between armed, %d without", apart, together)
	})

	t.Run("ReplaysFinishedKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()

		first := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
		second := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, second.Status)
		require.Equal(t, "true", second.Header.Get("Idempotent-Replayed"))
		require.Equal(t, string(first.Body), string(second.Body), "replay is byte for byte")
		requireOneCharge(t, b, key)
		require.Equal(t, 1, b.Stripe.Stats().ChargeRequests, "a replay makes no Stripe call")
	})

	t.Run("FormAndJSONAreTheSameRequest", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()

		first := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
		second := b.Do(t, http.MethodPost, "/rides",
			`{"target_lon": -122.2712, "target_lat": 37.8044, "origin_lon": -122.41940, "origin_lat": 3.77749e1}`,
			"Authorization", "Bearer "+b.Token, "Idempotency-Key", key, "Content-Type", "application/json; charset=utf-8")
		require.Equal(t, http.StatusCreated, second.Status, "%s", second.Body)
		require.Equal(t, "true", second.Header.Get("Idempotent-Replayed"))
		require.Equal(t, string(first.Body), string(second.Body))
	})

	t.Run("ProceedsWithUnlockedUnfinishedKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		claimed := b.Claim(t, key)
		require.NoError(t, b.Keys.Unlock(context.Background(), claimed))

		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		requireOneCharge(t, b, key)
	})

	t.Run("ProceedsWithStaleLock", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		claimed := b.Claim(t, key)
		_, err := b.Pool.Exec(context.Background(),
			`UPDATE idempotency_keys SET locked_at = now() - interval '1 hour' WHERE id = $1`, claimed.ID)
		require.NoError(t, err)

		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		requireOneCharge(t, b, key)
	})

	t.Run("RefusesRecentlyLockedKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		b.Claim(t, key)

		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusConflict, resp.Status, "%s", resp.Body)
		require.Equal(t, "request_in_progress", resp.JSON(t)["code"])
		require.NotEmpty(t, resp.Header.Get("Retry-After"))
		require.Equal(t, idem.Started, b.KeyRow(t, key).RecoveryPoint)
		require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM rides`))
	})

	t.Run("StoresDeclinedCard", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		post := func() *apitest.Response {
			return b.Do(t, http.MethodPost, "/rides", apitest.DefaultParams,
				"Authorization", "Bearer "+b.BadSourceToken, "Idempotency-Key", key, "Content-Type", formType)
		}

		first := post()
		require.Equal(t, http.StatusPaymentRequired, first.Status, "%s", first.Body)
		require.Equal(t, "application/problem+json", first.Header.Get("Content-Type"))
		body := first.JSON(t)
		require.Equal(t, "card_declined", body["code"])
		require.Equal(t, "Your card was declined.", body["detail"])

		second := post()
		require.Equal(t, http.StatusPaymentRequired, second.Status)
		require.Equal(t, "true", second.Header.Get("Idempotent-Replayed"))
		require.Equal(t, string(first.Body), string(second.Body))
		require.Equal(t, 1, b.Stripe.Stats().ChargeRequests, "the decline is not retried at Stripe")
		for _, r := range []*apitest.Response{first, second} {
			require.Equal(t, "false", r.Header.Get(problem.ShouldRetryHeader), "a stored decline is final, replayed or not")
		}
	})

	t.Run("StoresRejectedCharge", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A customer Stripe does not know: an invalid request, final.
		token := "tok-missing-customer-" + apitest.NewKey()
		_, err := user.Upsert(context.Background(), b.Pool, "ghost@example.com", "cus_doesnotexist", token)
		require.NoError(t, err)
		key := apitest.NewKey()
		post := func() *apitest.Response {
			return b.Do(t, http.MethodPost, "/rides", apitest.DefaultParams,
				"Authorization", "Bearer "+token, "Idempotency-Key", key, "Content-Type", formType)
		}
		first := post()
		require.Equal(t, http.StatusBadGateway, first.Status, "%s", first.Body)
		require.Equal(t, "payment_rejected", first.JSON(t)["code"])
		second := post()
		require.Equal(t, http.StatusBadGateway, second.Status)
		require.Equal(t, "true", second.Header.Get("Idempotent-Replayed"))
	})

	// Each resume test stops a request right after a phase commits, then
	// retries it: the retry continues from that recovery point and the
	// customer is charged exactly once.
	for _, tc := range []struct {
		name      string
		failpoint string
		stoppedAt idem.RecoveryPoint
	}{
		{"ResumesFromStarted", rides.FailAfterClaim, idem.Started},
		{"ResumesFromRideCreated", rides.FailAfterRideCreated, rides.RideCreated},
		{"ResumesFromChargeCreated", rides.FailAfterChargeCreated, rides.ChargeCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			key := apitest.NewKey()
			b.Fail(tc.failpoint, func(context.Context) error { return errors.New("injected failure") })

			failed := b.PostRide(t, key, apitest.DefaultParams)
			require.Equal(t, http.StatusInternalServerError, failed.Status, "%s", failed.Body)
			row := b.KeyRow(t, key)
			require.Equal(t, tc.stoppedAt, row.RecoveryPoint)
			require.Nil(t, row.LockedAt, "a failed request unlocks its key")
			if tc.stoppedAt == rides.RideCreated {
				require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides WHERE idempotency_key_id = $1`, row.ID))
			}

			b.Fail(tc.failpoint, nil)
			resp := b.PostRide(t, key, apitest.DefaultParams)
			require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
			require.Empty(t, resp.Header.Get("Idempotent-Replayed"), "the retry ran the rest of the request")
			requireOneCharge(t, b, key)
			require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides`))
			require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records`))
		})
	}

	t.Run("SerializationFailureInChargeStepUnlocksKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		var attempts int
		b.Fail(rides.FailInRecordCharge, func(context.Context) error {
			attempts++
			return &pgconn.PgError{Code: "40001", Message: "could not serialize access"}
		})

		failed := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusServiceUnavailable, failed.Status, "%s", failed.Body)
		require.Equal(t, "database_contention", failed.JSON(t)["code"])
		require.Equal(t, 3, attempts, "the phase is retried before giving up")
		row := b.KeyRow(t, key)
		require.Equal(t, rides.RideCreated, row.RecoveryPoint)
		require.Nil(t, row.LockedAt)
		require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM rides WHERE stripe_charge_id IS NOT NULL`))

		b.Fail(rides.FailInRecordCharge, nil)
		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		requireOneCharge(t, b, key)
	})

	t.Run("SerializationFailureRetriedInPhase", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		var attempts int
		b.Fail(rides.FailInRecordCharge, func(context.Context) error {
			attempts++
			if attempts == 1 {
				return &pgconn.PgError{Code: "40P01", Message: "deadlock detected"}
			}
			return nil
		})
		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		require.Equal(t, 2, attempts)
		requireOneCharge(t, b, key)
	})

	t.Run("InternalErrorInChargeStepUnlocksKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		b.Fail(rides.FailBeforeCharge, func(context.Context) error { return errors.New("boom") })

		failed := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusInternalServerError, failed.Status, "%s", failed.Body)
		require.Equal(t, "internal_error", failed.JSON(t)["code"])
		row := b.KeyRow(t, key)
		require.Equal(t, rides.RideCreated, row.RecoveryPoint)
		require.Nil(t, row.LockedAt)
		require.Nil(t, row.ResponseCode, "an internal error is not stored")
		require.Equal(t, 0, b.Stripe.Stats().ChargeRequests)
	})

	t.Run("StripeFailingBeforeCommitIsRetriedOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		// stripe-go retries 503 by itself, so make every attempt of the
		// first request fail.
		b.Stripe.SetFaults(fakestripe.Faults{FailNext: 3, FailStatus: http.StatusServiceUnavailable})

		failed := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusServiceUnavailable, failed.Status, "%s", failed.Body)
		require.Equal(t, "payment_unavailable", failed.JSON(t)["code"])
		require.NotEmpty(t, failed.Header.Get("Retry-After"))
		row := b.KeyRow(t, key)
		require.Equal(t, rides.RideCreated, row.RecoveryPoint, "recovery point unchanged")
		require.Nil(t, row.LockedAt, "key unlocked")
		require.Nil(t, row.ResponseCode, "a 503 is not stored")
		require.Empty(t, b.ChargesFor(row.ID))

		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		requireOneCharge(t, b, key)
	})

	t.Run("StripeDroppingAfterCommitChargesOnce", func(t *testing.T) {
		t.Parallel()
		// Without stripe-go's own retries the lost answer reaches us.
		b := &testBundle{Stack: apitest.New(t, apitest.Options{StripeRetries: new(int64)})}
		key := apitest.NewKey()
		b.Stripe.SetFaults(fakestripe.Faults{DropAfterCommitNext: 1})

		failed := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusServiceUnavailable, failed.Status, "%s", failed.Body)
		require.Equal(t, "payment_unavailable", failed.JSON(t)["code"])
		row := b.KeyRow(t, key)
		require.Equal(t, rides.RideCreated, row.RecoveryPoint)
		require.Nil(t, row.LockedAt)
		require.Len(t, b.ChargesFor(row.ID), 1, "Stripe made the charge even though we never heard")

		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		requireOneCharge(t, b, key)
		require.Equal(t, b.ChargesFor(row.ID)[0].ID, resp.JSON(t)["stripe_charge_id"], "the retry adopted the charge")
	})

	t.Run("StripeDroppingAfterCommitResolvedByStripeRetry", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		// With stripe-go's default retries, its second attempt carries the
		// same Stripe idempotency key and gets the stored charge back.
		b.Stripe.SetFaults(fakestripe.Faults{DropAfterCommitNext: 1})

		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		requireOneCharge(t, b, key)
		require.Equal(t, 1, b.Stripe.Stats().Replays)
	})

	t.Run("ConcurrentRequestsWithOneKeyChargeOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		b.Stripe.SetFaults(fakestripe.Faults{Latency: 50 * time.Millisecond})

		const n = 20
		statuses := make([]int, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { statuses[i] = b.PostRide(t, key, apitest.DefaultParams).Status })
		}
		wg.Wait()
		created := 0
		for _, s := range statuses {
			require.Contains(t, []int{http.StatusCreated, http.StatusConflict}, s)
			if s == http.StatusCreated {
				created++
			}
		}
		require.GreaterOrEqual(t, created, 1)
		requireOneCharge(t, b, key)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides`))
	})

	t.Run("SameKeyForAnotherUserIsIndependent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		require.Equal(t, http.StatusCreated, b.PostRide(t, key, apitest.DefaultParams).Status)
		other := b.Do(t, http.MethodPost, "/rides", "origin_lat=1&origin_lon=2&target_lat=3&target_lon=4",
			"Authorization", "Bearer "+b.BadSourceToken, "Idempotency-Key", key, "Content-Type", formType)
		require.Equal(t, http.StatusPaymentRequired, other.Status, "%s", other.Body)
		require.Empty(t, other.Header.Get("Idempotent-Replayed"))
		require.Equal(t, 2, b.Count(t, `SELECT count(*) FROM idempotency_keys`))
	})

	t.Run("RefusesReusedKeyWithDifferentParams", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		require.Equal(t, http.StatusCreated, b.PostRide(t, key, apitest.DefaultParams).Status)

		resp := b.PostRide(t, key, "origin_lat=0&origin_lon=0&target_lat=1&target_lon=1")
		require.Equal(t, http.StatusUnprocessableEntity, resp.Status, "%s", resp.Body)
		require.Equal(t, "idempotency_key_reused", resp.JSON(t)["code"])
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides`))
	})

	t.Run("ReusedKeyCheckedBeforeInFlight", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		b.Claim(t, key) // locked, in flight

		resp := b.PostRide(t, key, "origin_lat=0&origin_lon=0&target_lat=1&target_lon=1")
		require.Equal(t, http.StatusUnprocessableEntity, resp.Status, "%s", resp.Body)
		require.Equal(t, "idempotency_key_reused", resp.JSON(t)["code"])
	})
}

func TestCreateRideRejectsBadInput(t *testing.T) {
	t.Parallel()
	b := apitest.New(t, apitest.Options{})
	auth := "Bearer " + b.Token

	for _, tc := range []struct {
		name        string
		headers     []string
		body        string
		wantStatus  int
		wantCode    string
		wantInvalid []string
	}{
		{"MissingAuth", []string{"Idempotency-Key", apitest.NewKey(), "Content-Type", formType}, apitest.DefaultParams, 401, "unauthorized", nil},
		{"InvalidToken", []string{"Authorization", "Bearer nope", "Idempotency-Key", apitest.NewKey(), "Content-Type", formType}, apitest.DefaultParams, 401, "unauthorized", nil},
		{"BasicAuth", []string{"Authorization", "Basic Zm9vOmJhcg==", "Idempotency-Key", apitest.NewKey(), "Content-Type", formType}, apitest.DefaultParams, 401, "unauthorized", nil},
		{"MissingKey", []string{"Authorization", auth, "Content-Type", formType}, apitest.DefaultParams, 400, "idempotency_key_missing", nil},
		{"EmptyKey", []string{"Authorization", auth, "Idempotency-Key", "  ", "Content-Type", formType}, apitest.DefaultParams, 400, "idempotency_key_missing", nil},
		{"ShortKey", []string{"Authorization", auth, "Idempotency-Key", "abc", "Content-Type", formType}, apitest.DefaultParams, 400, "idempotency_key_invalid", nil},
		{"LongKey", []string{"Authorization", auth, "Idempotency-Key", strings.Repeat("k", 256), "Content-Type", formType}, apitest.DefaultParams, 400, "idempotency_key_invalid", nil},
		{"NonASCIIKey", []string{"Authorization", auth, "Idempotency-Key", "ключ-ключ-ключ-ключ-ключ", "Content-Type", formType}, apitest.DefaultParams, 400, "idempotency_key_invalid", nil},
		{"NonBreakingSpaceAroundKey", []string{"Authorization", auth, "Idempotency-Key", "\u00a0" + apitest.NewKey() + "\u00a0", "Content-Type", formType}, apitest.DefaultParams, 400, "idempotency_key_invalid", nil},
		{"BadlyQuotedKey", []string{"Authorization", auth, "Idempotency-Key", `"` + apitest.NewKey(), "Content-Type", formType}, apitest.DefaultParams, 400, "idempotency_key_invalid", nil},
		{"UnsupportedContentType", []string{"Authorization", auth, "Idempotency-Key", apitest.NewKey(), "Content-Type", "text/plain"}, apitest.DefaultParams, 415, "unsupported_media_type", nil},
		{"MalformedJSON", []string{"Authorization", auth, "Idempotency-Key", apitest.NewKey(), "Content-Type", "application/json"}, `{"origin_lat": 1,`, 400, "malformed_body", nil},
		{"JSONNotObject", []string{"Authorization", auth, "Idempotency-Key", apitest.NewKey(), "Content-Type", "application/json"}, `[1,2]`, 400, "malformed_body", nil},
		{"MalformedForm", []string{"Authorization", auth, "Idempotency-Key", apitest.NewKey(), "Content-Type", formType}, "origin_lat=%zz", 400, "malformed_body", nil},
		{"MissingParams", []string{"Authorization", auth, "Idempotency-Key", apitest.NewKey(), "Content-Type", formType}, "", 422, "invalid_params",
			[]string{"origin_lat", "origin_lon", "target_lat", "target_lon"}},
		{"NoBodyAtAll", []string{"Authorization", auth, "Idempotency-Key", apitest.NewKey()}, "", 422, "invalid_params",
			[]string{"origin_lat", "origin_lon", "target_lat", "target_lon"}},
		{"NotANumber", []string{"Authorization", auth, "Idempotency-Key", apitest.NewKey(), "Content-Type", formType},
			"origin_lat=north&origin_lon=0&target_lat=0&target_lon=0", 422, "invalid_params", []string{"origin_lat"}},
		{"NumberAsJSONString", []string{"Authorization", auth, "Idempotency-Key", apitest.NewKey(), "Content-Type", "application/json"},
			`{"origin_lat":"1","origin_lon":0,"target_lat":0,"target_lon":0}`, 422, "invalid_params", []string{"origin_lat"}},
		{"NaN", []string{"Authorization", auth, "Idempotency-Key", apitest.NewKey(), "Content-Type", formType},
			"origin_lat=NaN&origin_lon=Inf&target_lat=0&target_lon=0", 422, "invalid_params", []string{"origin_lat", "origin_lon"}},
		{"OutOfRange", []string{"Authorization", auth, "Idempotency-Key", apitest.NewKey(), "Content-Type", formType},
			"origin_lat=90.5&origin_lon=-180.1&target_lat=-91&target_lon=181", 422, "invalid_params",
			[]string{"origin_lat", "origin_lon", "target_lat", "target_lon"}},
		{"UnknownParam", []string{"Authorization", auth, "Idempotency-Key", apitest.NewKey(), "Content-Type", formType},
			apitest.DefaultParams + "&tip=100", 422, "invalid_params", []string{"tip"}},
		{"SimulatedErrorWhenDisabled", []string{"Authorization", auth, "Idempotency-Key", apitest.NewKey(), "Content-Type", formType},
			apitest.DefaultParams + "&raise_error=true", 422, "invalid_params", []string{"raise_error"}},
		{"RepeatedParam", []string{"Authorization", auth, "Idempotency-Key", apitest.NewKey(), "Content-Type", formType},
			apitest.DefaultParams + "&origin_lat=1", 422, "invalid_params", []string{"origin_lat"}},
		{"DuplicateJSONKey", []string{"Authorization", auth, "Idempotency-Key", apitest.NewKey(), "Content-Type", "application/json"},
			`{"origin_lat":1,"origin_lat":2,"origin_lon":0,"target_lat":0,"target_lon":0}`, 422, "invalid_params", []string{"origin_lat"}},
		{"JSONNull", []string{"Authorization", auth, "Idempotency-Key", apitest.NewKey(), "Content-Type", "application/json"},
			`{"origin_lat":null,"origin_lon":0,"target_lat":0,"target_lon":0}`, 422, "invalid_params", []string{"origin_lat must be a number"}},
		{"HexFloatInForm", []string{"Authorization", auth, "Idempotency-Key", apitest.NewKey(), "Content-Type", formType},
			"origin_lat=0x1p-2&origin_lon=1_0&target_lat=0&target_lon=0", 422, "invalid_params", []string{"origin_lat", "origin_lon"}},
		{"BodyTooLarge", []string{"Authorization", auth, "Idempotency-Key", apitest.NewKey(), "Content-Type", formType},
			apitest.DefaultParams + "&pad=" + strings.Repeat("x", 70<<10), 413, "body_too_large", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp := b.Do(t, http.MethodPost, "/rides", tc.body, tc.headers...)
			require.Equal(t, tc.wantStatus, resp.Status, "%s", resp.Body)
			require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
			body := resp.JSON(t)
			require.Equal(t, tc.wantCode, body["code"])
			require.EqualValues(t, tc.wantStatus, body["status"])
			for _, name := range tc.wantInvalid {
				require.Contains(t, invalidParams(t, resp), name, "invalid_params names the parameter")
			}
		})
	}

	t.Run("NothingWritten", func(t *testing.T) {
		// Runs after the parallel cases above have finished.
		t.Cleanup(func() {
			require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM idempotency_keys`))
			require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM rides`))
			require.Equal(t, 0, b.Stripe.Stats().ChargeRequests)
		})
	})

	t.Run("QuotedKeyIsUnquoted", func(t *testing.T) {
		b := apitest.New(t, apitest.Options{})
		key := apitest.NewKey()
		resp := b.Do(t, http.MethodPost, "/rides", apitest.DefaultParams,
			"Authorization", "Bearer "+b.Token, "Idempotency-Key", `"`+key+`"`, "Content-Type", formType)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		replay := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	})
}

func TestReadRides(t *testing.T) {
	t.Parallel()
	b := apitest.New(t, apitest.Options{})

	var ids []float64
	for range 3 {
		resp := b.PostRide(t, apitest.NewKey(), apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		ids = append(ids, resp.JSON(t)["id"].(float64))
	}
	get := func(token, path string) *apitest.Response {
		return b.Do(t, http.MethodGet, path, "", "Authorization", "Bearer "+token)
	}

	t.Run("GetOwnRide", func(t *testing.T) {
		t.Parallel()
		resp := get(b.Token, fmt.Sprintf("/rides/%d", int64(ids[0])))
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		require.Equal(t, ids[0], resp.JSON(t)["id"])
		require.NotEmpty(t, resp.JSON(t)["stripe_charge_id"])
	})
	t.Run("AnotherUsersRideIsNotFound", func(t *testing.T) {
		t.Parallel()
		resp := get(b.BadSourceToken, fmt.Sprintf("/rides/%d", int64(ids[0])))
		require.Equal(t, http.StatusNotFound, resp.Status)
		require.Equal(t, "ride_not_found", resp.JSON(t)["code"])
	})
	t.Run("UnknownRideIsNotFound", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, http.StatusNotFound, get(b.Token, "/rides/999999").Status)
		require.Equal(t, http.StatusNotFound, get(b.Token, "/rides/abc").Status)
	})
	t.Run("ListNewestFirstPaginated", func(t *testing.T) {
		t.Parallel()
		page := get(b.Token, "/rides?limit=2").JSON(t)
		data := page["data"].([]any)
		require.Len(t, data, 2)
		require.Equal(t, ids[2], data[0].(map[string]any)["id"])
		require.Equal(t, ids[1], data[1].(map[string]any)["id"])
		require.Equal(t, true, page["has_more"])

		next := get(b.Token, fmt.Sprintf("/rides?limit=2&starting_after=%d", int64(ids[1]))).JSON(t)
		data = next["data"].([]any)
		require.Len(t, data, 1)
		require.Equal(t, ids[0], data[0].(map[string]any)["id"])
		require.Equal(t, false, next["has_more"])
	})
	t.Run("ListOnlyOwnRides", func(t *testing.T) {
		t.Parallel()
		page := get(b.BadSourceToken, "/rides").JSON(t)
		require.Empty(t, page["data"])
	})
	t.Run("ListRejectsBadLimit", func(t *testing.T) {
		t.Parallel()
		resp := get(b.Token, "/rides?limit=1000")
		require.Equal(t, http.StatusBadRequest, resp.Status)
		require.Contains(t, resp.JSON(t)["detail"], "limit")
	})
	t.Run("RequiresAuth", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, http.StatusUnauthorized, b.Do(t, http.MethodGet, "/rides", "").Status)
	})
	// Ids are BIGINT: a valid id of 2^31 or more is an ordinary cursor,
	// not a 500 from a parameter Postgres took for an int4.
	t.Run("ListStartingAfterPastInt4", func(t *testing.T) {
		t.Parallel()
		resp := get(b.Token, "/rides?starting_after=2147483648")
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		require.Len(t, resp.JSON(t)["data"], 3)
	})
	// A query the endpoint cannot read exactly is refused, naming the
	// problem, instead of being partly ignored.
	for _, tc := range []struct{ name, query, want string }{
		{"SemicolonSeparator", "limit=5;x=1", "malformed"},
		{"BadEscape", "limit=%zz", "malformed"},
		{"RepeatedParam", "limit=1&limit=2", "limit is given more than once"},
		{"UnknownParam", "limit=2&startingafter=3", "startingafter is not a known query parameter"},
		{"LongUnknownParamIsClipped", strings.Repeat("p", 10_000) + "=1", "is not a known query parameter"},
		// Empty values used to be taken for absent ones: ?status= listed
		// rides of every status.
		{"EmptyStatus", "status=", "status is empty"},
		{"EmptyLimit", "limit=", "limit is empty"},
		{"EmptyStartingAfter", "limit=2&starting_after=", "starting_after is empty"},
		{"BareLimit", "limit", "limit is empty"},
	} {
		t.Run("ListRejectsMalformedQuery/"+tc.name, func(t *testing.T) {
			t.Parallel()
			resp := get(b.Token, "/rides?"+tc.query)
			require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
			body := resp.JSON(t)
			require.Equal(t, "invalid_query", body["code"])
			require.Contains(t, body["detail"], tc.want)
			require.Less(t, len(resp.Body), 1000, "the problem does not echo the whole query")
		})
	}
}

// TestRideIDsPastInt4 runs a ride's whole life with ids past 2^31, where
// a parameter Postgres infers as int4 fails.
func TestRideIDsPastInt4(t *testing.T) {
	t.Parallel()
	b := apitest.New(t, apitest.Options{})
	const past = int64(1)<<31 + 1000
	_, err := b.Pool.Exec(context.Background(), fmt.Sprintf(`
		ALTER SEQUENCE rides_id_seq RESTART WITH %d;
		ALTER SEQUENCE idempotency_keys_id_seq RESTART WITH %d;
		ALTER SEQUENCE audit_records_id_seq RESTART WITH %d;
		ALTER SEQUENCE staged_jobs_id_seq RESTART WITH %d`, past, past, past, past))
	require.NoError(t, err)
	get := func(path string) *apitest.Response {
		return b.Do(t, http.MethodGet, path, "", "Authorization", "Bearer "+b.Token)
	}

	// A request that stops after its ride is created, then resumes.
	key := apitest.NewKey()
	b.Fail(rides.FailAfterRideCreated, func(context.Context) error { return errors.New("injected failure") })
	require.Equal(t, http.StatusInternalServerError, b.PostRide(t, key, apitest.DefaultParams).Status)
	b.Fail(rides.FailAfterRideCreated, nil)
	first := b.PostRide(t, key, apitest.DefaultParams)
	require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
	id := int64(first.JSON(t)["id"].(float64))
	require.GreaterOrEqual(t, id, past)
	require.Equal(t, "true", b.PostRide(t, key, apitest.DefaultParams).Header.Get("Idempotent-Replayed"))

	second := b.PostRide(t, apitest.NewKey(), apitest.DefaultParams)
	require.Equal(t, http.StatusCreated, second.Status, "%s", second.Body)

	one := get(fmt.Sprintf("/rides/%d", id))
	require.Equal(t, http.StatusOK, one.Status, "%s", one.Body)
	require.Equal(t, float64(id), one.JSON(t)["id"])

	page := get(fmt.Sprintf("/rides?limit=1&starting_after=%d", id+1))
	require.Equal(t, http.StatusOK, page.Status, "%s", page.Body)
	data := page.JSON(t)["data"].([]any)
	require.Len(t, data, 1)
	require.Equal(t, float64(id), data[0].(map[string]any)["id"])
}

// TestReadRidesFailure: reading rides changes nothing, so a failed read
// says to try again; it has no idempotency key to retry with.
func TestReadRidesFailure(t *testing.T) {
	t.Parallel()
	b := apitest.New(t, apitest.Options{})
	resp := b.PostRide(t, apitest.NewKey(), apitest.DefaultParams)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	id := int64(resp.JSON(t)["id"].(float64))
	// Break every read of rides.
	_, err := b.Pool.Exec(context.Background(), `ALTER TABLE rides RENAME COLUMN currency TO currency_gone`)
	require.NoError(t, err)

	for _, path := range []string{"/rides", fmt.Sprintf("/rides/%d", id)} {
		resp := b.Do(t, http.MethodGet, path, "", "Authorization", "Bearer "+b.Token)
		require.Equal(t, http.StatusInternalServerError, resp.Status, "%s: %s", path, resp.Body)
		body := resp.JSON(t)
		require.Equal(t, "internal_error", body["code"])
		require.NotContains(t, strings.ToLower(body["detail"].(string)), "idempotency", path)
	}
}

// TestBadInputSaysWhatToDo: a body the api cannot use gets an answer that
// says where it went wrong and how to fix it.
func TestBadInputSaysWhatToDo(t *testing.T) {
	t.Parallel()
	b := apitest.New(t, apitest.Options{})

	for _, tc := range []struct {
		name, contentType, body string
		wantStatus              int
		wantDetail              string
	}{
		{"TruncatedJSON", "application/json", `{"origin_lat": 1,`, 400,
			"malformed request body: json: the body ends before the object does, at line 1, column 18 (byte 18)"},
		{"JSONSyntaxOnSecondLine", "application/json", "{\"origin_lat\": 1,\n \"origin_lon\": 2x}", 400,
			`malformed request body: json: invalid character 'x' after object key:value pair at line 2, column 16 (byte 34)`},
		{"EmptyJSON", "application/json", "  ", 400,
			"malformed request body: json: the body is empty; send a JSON object"},
		{"JSONSentAsForm", formType, `{"origin_lat":37.7,"origin_lon":-122.4,"target_lat":37.8,"target_lon":-122.2}`, 422,
			"5 parameters are invalid; invalid_params says which and why. The body looks like JSON sent as a form " +
				"(Content-Type: application/x-www-form-urlencoded, curl -d's default): set Content-Type: application/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp := b.Do(t, http.MethodPost, "/rides", tc.body,
				"Authorization", "Bearer "+b.Token, "Idempotency-Key", apitest.NewKey(), "Content-Type", tc.contentType)
			require.Equal(t, tc.wantStatus, resp.Status, "%s", resp.Body)
			require.Equal(t, tc.wantDetail, resp.JSON(t)["detail"])
		})
	}
}

func TestSimulatedErrors(t *testing.T) {
	t.Parallel()
	b := apitest.New(t, apitest.Options{SimulatedErrors: true})
	key := apitest.NewKey()

	failed := b.PostRide(t, key, apitest.DefaultParams+"&raise_error=true")
	require.Equal(t, http.StatusInternalServerError, failed.Status, "%s", failed.Body)
	require.Equal(t, rides.RideCreated, b.KeyRow(t, key).RecoveryPoint)
	// A retry would ask for the failure again: the server says so,
	// although a 500 is retried otherwise.
	require.Equal(t, "false", failed.Header.Get(problem.ShouldRetryHeader))
	// and its detail says the same, not the 500's usual "retry".
	detail := failed.JSON(t)["detail"].(string)
	require.Contains(t, detail, "Do not retry it")
	require.NotContains(t, detail, "Retry with")

	repeated := b.PostRide(t, apitest.NewKey(), apitest.DefaultParams+"&raise_error=true&raise_error=false")
	require.Equal(t, http.StatusUnprocessableEntity, repeated.Status, "%s", repeated.Body)
	require.Contains(t, invalidParams(t, repeated), "raise_error is given more than once")

	// raise_error is not part of the request's fingerprint: the retry
	// without it is the same request and finishes it.
	resp := b.PostRide(t, key, apitest.DefaultParams)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
}
