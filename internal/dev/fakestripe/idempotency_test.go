package fakestripe_test

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/dev/fakestripe/fakestripetest"
	"github.com/rocketrides/rocketrides/internal/testkit/testclock"
)

func TestIdempotency(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		fake     *fake
		customer *stripe.Customer
	}

	setup := func(t *testing.T, config *fakestripe.Config) *testBundle {
		t.Helper()
		fake := startFake(t, config)
		return &testBundle{fake: fake, customer: fake.createCustomer(t, "rider@example.com", fakestripe.TokenVisa)}
	}

	t.Run("ReplaysSameKey", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &fakestripe.Config{})

		first, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		require.NoError(t, err)
		require.Empty(t, first.LastResponse.Header.Get("Idempotent-Replayed"))
		require.Equal(t, "ride-1", first.LastResponse.IdempotencyKey)

		second, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		require.NoError(t, err)
		require.Equal(t, first.ID, second.ID)
		require.Equal(t, "true", second.LastResponse.Header.Get("Idempotent-Replayed"))
		require.Equal(t, first.LastResponse.RequestID, second.LastResponse.Header.Get("Original-Request"))
		require.Equal(t, first.LastResponse.RawJSON, second.LastResponse.RawJSON, "a replay is the first response, byte for byte")

		require.Len(t, bundle.fake.server.Charges(), 1)
		stats := bundle.fake.server.Stats()
		require.Equal(t, 2, stats.ChargeRequests)
		require.Equal(t, 1, stats.Replays)
	})

	t.Run("ReplaysRawRequestInAnyParameterOrder", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &fakestripe.Config{})
		customerID := bundle.customer.ID

		first := bundle.fake.do(t, http.MethodPost, "/v1/charges", testAPIKey, "ride-1",
			"amount=2000&currency=usd&customer="+customerID+"&metadata[ride_id]=42&metadata[user_id]=7")
		require.Equal(t, http.StatusOK, first.status, string(first.body))
		require.Empty(t, first.header.Get("Idempotent-Replayed"))

		second := bundle.fake.do(t, http.MethodPost, "/v1/charges", testAPIKey, "ride-1",
			"metadata[user_id]=7&customer="+customerID+"&metadata[ride_id]=42&currency=usd&amount=2000")
		require.Equal(t, http.StatusOK, second.status)
		require.Equal(t, "true", second.header.Get("Idempotent-Replayed"))
		require.Equal(t, first.body, second.body)
		require.Len(t, bundle.fake.server.Charges(), 1)
	})

	t.Run("RejectsSameKeyWithDifferentParams", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &fakestripe.Config{})

		_, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		require.NoError(t, err)

		_, err = bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 3000, "ride-1"))
		stripeErr := asStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeIdempotency, "")
		require.Contains(t, stripeErr.Msg, "same parameters")
		require.Contains(t, stripeErr.Msg, "ride-1")
		var idempotencyErr *stripe.IdempotencyError
		require.ErrorAs(t, err, &idempotencyErr)
		require.Len(t, bundle.fake.server.Charges(), 1)
		require.Equal(t, 1, bundle.fake.server.Stats().IdempotencyMismatches)
	})

	t.Run("RejectsSameKeyOnDifferentEndpoint", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &fakestripe.Config{})

		params := &stripe.CustomerParams{Email: stripe.String("x@example.com"), Source: stripe.String(fakestripe.TokenVisa)}
		params.SetIdempotencyKey("shared")
		_, err := bundle.fake.client.Customers.New(params)
		require.NoError(t, err)

		_, err = bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "shared"))
		stripeErr := asStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeIdempotency, "")
		require.Contains(t, stripeErr.Msg, "same endpoint")
		require.Equal(t, 1, bundle.fake.server.Stats().IdempotencyMismatches)
	})

	t.Run("ScopesKeysPerAPIKey", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &fakestripe.Config{})

		first, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		require.NoError(t, err)

		otherClient := fakestripetest.NewClient(bundle.fake.baseURL, "sk_test_other")
		second, err := otherClient.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		require.NoError(t, err)
		require.NotEqual(t, first.ID, second.ID)
		require.Empty(t, second.LastResponse.Header.Get("Idempotent-Replayed"))
	})

	t.Run("ForgetsKeyAfterRetention", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &fakestripe.Config{KeyRetention: time.Hour})

		first, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		require.NoError(t, err)

		bundle.fake.server.Advance(59 * time.Minute)
		replayed, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		require.NoError(t, err)
		require.Equal(t, first.ID, replayed.ID)

		// Retention counts from the key's first use, not its last.
		bundle.fake.server.Advance(time.Minute)
		again, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		require.NoError(t, err)
		require.NotEqual(t, first.ID, again.ID)
		require.Empty(t, again.LastResponse.Header.Get("Idempotent-Replayed"))
		require.Len(t, bundle.fake.server.Charges(), 2)

		// The forgotten key was claimed afresh, so it replays again.
		replayed, err = bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		require.NoError(t, err)
		require.Equal(t, again.ID, replayed.ID)
	})

	t.Run("ForgetsKeyOnInjectedClock", func(t *testing.T) {
		t.Parallel()
		clock := testclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		bundle := setup(t, &fakestripe.Config{Now: clock.Now})

		first, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		require.NoError(t, err)

		clock.Set(clock.Now().Add(fakestripe.DefaultKeyRetention))
		again, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		require.NoError(t, err)
		require.NotEqual(t, first.ID, again.ID)
		require.Equal(t, clock.Now().Unix(), again.Created)
	})

	t.Run("DoesNotStoreRejectedParams", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &fakestripe.Config{})

		_, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 10, "ride-1"))
		requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeAmountTooSmall)

		// Nothing executed, so the corrected request runs under the same key.
		charge, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		require.NoError(t, err)
		require.Empty(t, charge.LastResponse.Header.Get("Idempotent-Replayed"))
	})

	t.Run("ReplaysDecline", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &fakestripe.Config{})
		broke := bundle.fake.createCustomer(t, "broke@example.com", fakestripe.TokenChargeCustomerFail)

		_, err := bundle.fake.client.Charges.New(chargeParams(broke.ID, 2000, "ride-1"))
		first := asStripeError(t, err, http.StatusPaymentRequired, stripe.ErrorTypeCard, stripe.ErrorCodeCardDeclined)

		_, err = bundle.fake.client.Charges.New(chargeParams(broke.ID, 2000, "ride-1"))
		second := asStripeError(t, err, http.StatusPaymentRequired, stripe.ErrorTypeCard, stripe.ErrorCodeCardDeclined)
		require.Equal(t, "true", second.LastResponse.Header.Get("Idempotent-Replayed"))
		require.Equal(t, first.ChargeID, second.ChargeID)
		require.Len(t, bundle.fake.server.Charges(), 1, "the decline executed once")
	})

	t.Run("ConcurrentRequestsWithSameKeyChargeOnce", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &fakestripe.Config{})
		// Hold the first request in execution while the others arrive.
		// They are refused at once, from the key's lock; the hold is
		// what a loaded machine may need to send them, many times over.
		bundle.fake.server.SetFaults(fakestripe.Faults{Latency: 5 * time.Second})

		const n = 8
		var (
			wg        sync.WaitGroup
			mu        sync.Mutex
			succeeded []string
			conflicts int
		)
		for range n {
			wg.Go(func() {
				charge, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					succeeded = append(succeeded, charge.ID)
					return
				}
				var stripeErr *stripe.Error
				if assertErrorAs(t, err, &stripeErr) && stripeErr.HTTPStatusCode == http.StatusConflict &&
					stripeErr.Type == stripe.ErrorTypeIdempotency && stripeErr.Code == stripe.ErrorCodeIdempotencyKeyInUse {
					conflicts++
					return
				}
				t.Errorf("unexpected error: %v", err)
			})
		}
		wg.Wait()

		require.Len(t, succeeded, 1)
		require.Equal(t, n-1, conflicts)
		charges := bundle.fake.server.Charges()
		require.Len(t, charges, 1)
		require.Equal(t, succeeded[0], charges[0].ID)

		bundle.fake.server.ClearFaults()
		replayed, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, "ride-1"))
		require.NoError(t, err)
		require.Equal(t, succeeded[0], replayed.ID)
	})

	t.Run("ConcurrentRequestsWithDistinctKeysAllCharge", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &fakestripe.Config{})

		const n = 20
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				_, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 2000, fmt.Sprintf("ride-%d", i)))
				if err != nil {
					t.Errorf("charge %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		require.Len(t, bundle.fake.server.Charges(), n)
	})

	t.Run("RejectsOverlongKey", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &fakestripe.Config{})

		key := make([]byte, 256)
		for i := range key {
			key[i] = 'k'
		}
		resp := bundle.fake.do(t, http.MethodPost, "/v1/charges", testAPIKey, string(key),
			"amount=2000&currency=usd&customer="+bundle.customer.ID)
		require.Equal(t, http.StatusBadRequest, resp.status)
		require.Empty(t, bundle.fake.server.Charges())
	})
}

// assertErrorAs is require.ErrorAs for goroutines, which must not stop the
// test from outside its own goroutine.
func assertErrorAs(t *testing.T, err error, target any) bool {
	t.Helper()
	if !errors.As(err, target) {
		t.Errorf("error %v is not %T", err, target)
		return false
	}
	return true
}
