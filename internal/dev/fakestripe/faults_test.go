package fakestripe_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/payment"
)

func TestFaults(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		fake     *fake
		customer *stripe.Customer
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		fake := startFake(t, &fakestripe.Config{})
		return &testBundle{fake: fake, customer: fake.createCustomer(t, "rider@example.com", fakestripe.TokenVisa)}
	}

	t.Run("FailNextFailsBeforeExecuting", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.fake.server.SetFaults(fakestripe.Faults{FailNext: 1})

		_, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
		require.Empty(t, bundle.fake.server.Charges())
		require.Zero(t, bundle.fake.server.Faults().FailNext, "the fault fired once")

		// Nothing was stored against the key, so the retry executes.
		charge, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		require.NoError(t, err)
		require.Empty(t, charge.LastResponse.Header.Get("Idempotent-Replayed"))

		replayed, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		require.NoError(t, err)
		require.Equal(t, charge.ID, replayed.ID)
		require.Len(t, bundle.fake.server.Charges(), 1)
	})

	t.Run("FailNextUsesFailStatus", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.fake.server.SetFaults(fakestripe.Faults{FailNext: 2, FailStatus: http.StatusServiceUnavailable})

		for range 2 {
			_, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, ""))
			requireStripeError(t, err, http.StatusServiceUnavailable, stripe.ErrorTypeAPI, "")
		}
		_, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, ""))
		require.NoError(t, err)
	})

	t.Run("DropAfterCommitLeavesClientInTheDark", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		// setup's customer request left a kept-alive connection in the
		// client's pool; the charge reuses it, the case where Go's transport
		// would resend a request whose connection closed cleanly.
		bundle.fake.server.SetFaults(fakestripe.Faults{DropAfterCommitNext: 1})

		_, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		require.Error(t, err)
		require.True(t, isConnectionError(err), "want a connection error, got %v", err)

		// The charge happened all the same.
		charges := bundle.fake.server.Charges()
		require.Len(t, charges, 1)
		require.Equal(t, 1, bundle.fake.server.Stats().ChargeRequests, "the transport did not resend the request")

		// Retrying with the same key finds out what happened.
		charge, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		require.NoError(t, err)
		require.Equal(t, charges[0].ID, charge.ID)
		require.Equal(t, "true", charge.LastResponse.Header.Get("Idempotent-Replayed"))
		require.Len(t, bundle.fake.server.Charges(), 1)
	})

	// stripe-go, as the api runs it, resends a request whose connection
	// broke, with the same idempotency key, MaxNetworkRetries times (2 by
	// default). DropAfterCommitNext drops only the answer of the request
	// that executed, so the resend's replay reaches the client inside
	// the same call: the loss is absorbed where nobody sees it.
	t.Run("DropAfterCommitIsAbsorbedByStripeGosRetry", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		retrying := retryingClient(t, bundle.fake.baseURL)
		bundle.fake.server.SetFaults(fakestripe.Faults{DropAfterCommitNext: 1})

		charge, err := retrying.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		require.NoError(t, err, "stripe-go's own retry got the replay")
		require.Equal(t, "true", charge.LastResponse.Header.Get("Idempotent-Replayed"))
		stats := bundle.fake.server.Stats()
		require.Equal(t, 1, stats.Charges)
		require.Equal(t, 2, stats.ChargeRequests, "the lost one and stripe-go's resend")
		require.Equal(t, 1, stats.DroppedAnswers)
	})

	// DropAnswerNext loses the replays' answers too: a client that
	// resends with the same key gets no answer until the drops are used
	// up, and Stripe still made one charge.
	t.Run("DropAnswerLosesReplaysToo", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		retrying := retryingClient(t, bundle.fake.baseURL)
		bundle.fake.server.SetFaults(fakestripe.Faults{DropAnswerNext: 3})

		_, err := retrying.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		require.True(t, isConnectionError(err), "want a connection error, got %v", err)
		stats := bundle.fake.server.Stats()
		require.Equal(t, 1, stats.Charges, "one charge, made by the first request")
		require.Equal(t, 3, stats.ChargeRequests, "the first and stripe-go's two resends")
		require.Equal(t, 2, stats.Replays)
		require.Equal(t, 3, stats.DroppedAnswers)
		require.Zero(t, bundle.fake.server.Faults().DropAnswerNext, "every drop was used")

		// The next call with the same key hears the charge made.
		charge, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		require.NoError(t, err)
		require.Equal(t, "true", charge.LastResponse.Header.Get("Idempotent-Replayed"))
		require.Equal(t, bundle.fake.server.Charges()[0].ID, charge.ID)
		require.Len(t, bundle.fake.server.Charges(), 1)
	})

	t.Run("DropAnswerWithoutKeyStillCharges", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.fake.server.SetFaults(fakestripe.Faults{DropAnswerNext: 1})

		_, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, ""))
		require.True(t, isConnectionError(err), "want a connection error, got %v", err)
		require.Len(t, bundle.fake.server.Charges(), 1)
		_, err = bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, ""))
		require.NoError(t, err)
	})

	t.Run("StoreFailureReplaysInternalError", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.fake.server.SetFaults(fakestripe.Faults{StoreFailureNext: 1})

		_, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		first := asStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
		require.Empty(t, first.LastResponse.Header.Get("Idempotent-Replayed"))

		_, err = bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		second := asStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
		require.Equal(t, "true", second.LastResponse.Header.Get("Idempotent-Replayed"))
		require.Empty(t, bundle.fake.server.Charges())

		// Only a new key gets through.
		_, err = bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1-retry"))
		require.NoError(t, err)
		require.Len(t, bundle.fake.server.Charges(), 1)
	})

	t.Run("StoreFailureSkipsRequestsWithoutKey", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.fake.server.SetFaults(fakestripe.Faults{StoreFailureNext: 1})

		resp := bundle.fake.do(t, http.MethodPost, "/v1/charges", testAPIKey, "",
			"amount=2000&currency=usd&customer="+bundle.customer.ID)
		require.Equal(t, http.StatusOK, resp.status)
		require.Equal(t, 1, bundle.fake.server.Faults().StoreFailureNext)
	})

	t.Run("LatencyDelaysCharges", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.fake.server.SetFaults(fakestripe.Faults{Latency: 200 * time.Millisecond})

		start := time.Now()
		_, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, ""))
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
	})

	t.Run("LatencyStopsWhenClientGivesUp", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.fake.server.SetFaults(fakestripe.Faults{Latency: time.Minute})

		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		params := chargeParams(bundle.customer.ID, 2000, "ride-1")
		params.Context = ctx
		_, err := bundle.fake.client.Charges.New(params)
		require.ErrorIs(t, err, context.DeadlineExceeded)

		// The abandoned request releases its key without executing; until
		// the server notices the client left, the key reads as in use.
		bundle.fake.server.ClearFaults()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			charge, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
			if assert.NoError(c, err) {
				assert.Empty(c, charge.LastResponse.Header.Get("Idempotent-Replayed"))
			}
		}, 5*time.Second, 20*time.Millisecond)
		require.Len(t, bundle.fake.server.Charges(), 1)
	})

	t.Run("FaultsTouchOnlyCharges", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.fake.server.SetFaults(fakestripe.Faults{FailNext: 1, DropAfterCommitNext: 1, DropAnswerNext: 1, StoreFailureNext: 1})

		bundle.fake.createCustomer(t, "other@example.com", fakestripe.TokenVisa)
		_, err := bundle.fake.client.Charges.Get("ch_missing", nil)
		requireStripeError(t, err, http.StatusNotFound, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)
		require.Equal(t, fakestripe.Faults{FailNext: 1, DropAfterCommitNext: 1, DropAnswerNext: 1, StoreFailureNext: 1}, bundle.fake.server.Faults())
	})
}

func TestFaultsEndpoint(t *testing.T) {
	t.Parallel()

	type faults struct {
		FailNext            int   `json:"fail_next"`
		FailStatus          int   `json:"fail_status"`
		LatencyMS           int64 `json:"latency_ms"`
		DropAfterCommitNext int   `json:"drop_after_commit_next"`
		DropAnswerNext      int   `json:"drop_answer_next"`
		StoreFailureNext    int   `json:"store_failure_next"`
	}

	type testBundle struct {
		fake *fake
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{fake: startFake(t, &fakestripe.Config{})}
	}

	postFaults := func(t *testing.T, bundle *testBundle, body string) rawResponse {
		t.Helper()
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost,
			bundle.fake.baseURL+"/_fake/faults", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		return send(t, req)
	}

	t.Run("PatchesOnlyFieldsGiven", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		resp := postFaults(t, bundle, `{"fail_next": 2, "fail_status": 503}`)
		require.Equal(t, http.StatusOK, resp.status, string(resp.body))
		require.Equal(t, faults{FailNext: 2, FailStatus: 503}, decode[faults](t, resp.body))

		resp = postFaults(t, bundle, `{"latency_ms": 50, "drop_after_commit_next": 1, "drop_answer_next": 4, "store_failure_next": 3}`)
		require.Equal(t, http.StatusOK, resp.status)
		want := faults{FailNext: 2, FailStatus: 503, LatencyMS: 50, DropAfterCommitNext: 1, DropAnswerNext: 4, StoreFailureNext: 3}
		require.Equal(t, want, decode[faults](t, resp.body))

		resp = bundle.fake.do(t, http.MethodGet, "/_fake/faults", "", "", "")
		require.Equal(t, want, decode[faults](t, resp.body))
		require.Equal(t, fakestripe.Faults{
			FailNext: 2, FailStatus: 503, Latency: 50 * time.Millisecond, DropAfterCommitNext: 1, DropAnswerNext: 4, StoreFailureNext: 3,
		}, bundle.fake.server.Faults())
	})

	t.Run("DeleteClearsFaults", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		require.Equal(t, http.StatusOK, postFaults(t, bundle, `{"fail_next": 2, "latency_ms": 10}`).status)
		resp := bundle.fake.do(t, http.MethodDelete, "/_fake/faults", "", "", "")
		require.Equal(t, http.StatusOK, resp.status)
		require.Equal(t, faults{FailStatus: 500}, decode[faults](t, resp.body))
		require.Equal(t, fakestripe.Faults{}, bundle.fake.server.Faults())
	})

	t.Run("RejectsInvalidFaults", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		for _, body := range []string{
			`{"fail_nxt": 1}`,
			`{"fail_next": -1}`,
			`{"latency_ms": -5}`,
			`{"drop_answer_next": -1}`,
			`{"fail_status": 200}`,
			`not json`,
		} {
			require.Equal(t, http.StatusBadRequest, postFaults(t, bundle, body).status, body)
		}
		require.Equal(t, fakestripe.Faults{}, bundle.fake.server.Faults())
	})

	t.Run("InjectsFaultsIntoCharges", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		customer := bundle.fake.createCustomer(t, "rider@example.com", fakestripe.TokenVisa)

		require.Equal(t, http.StatusOK, postFaults(t, bundle, `{"fail_next": 1}`).status)
		_, err := bundle.fake.client.Charges.New(chargeParams(customer.ID, 2000, "ride-1"))
		requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
		_, err = bundle.fake.client.Charges.New(chargeParams(customer.ID, 2000, "ride-1"))
		require.NoError(t, err)
	})

	t.Run("CountsInStats", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		customer := bundle.fake.createCustomer(t, "rider@example.com", fakestripe.TokenVisa)

		bundle.fake.server.SetFaults(fakestripe.Faults{FailNext: 1})
		for range 3 {
			_, _ = bundle.fake.client.Charges.New(chargeParams(customer.ID, 2000, "ride-1"))
		}

		resp := bundle.fake.do(t, http.MethodGet, "/_fake/stats", "", "", "")
		require.Equal(t, http.StatusOK, resp.status)
		require.JSONEq(t, `{"charges": 1, "customers": 1, "charge_requests": 3, "replays": 1, "idempotency_mismatches": 0, "dropped_answers": 0}`, string(resp.body))
	})
}

// retryingClient is a stripe-go client for the fake at baseURL built as
// the api's payment.Gateway builds its own: stripe-go's network retries
// at their default.
func retryingClient(t *testing.T, baseURL string) *client.API {
	t.Helper()
	api, err := payment.NewStripeClient(&payment.Config{APIKey: testAPIKey, BaseURL: baseURL})
	require.NoError(t, err)
	return api
}
