package payment_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripego "github.com/stripe/stripe-go/v76"

	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/platform/config"
)

func TestNew(t *testing.T) {
	t.Parallel()

	t.Run("NeedsAnAPIKey", func(t *testing.T) {
		t.Parallel()
		_, err := payment.New(nil)
		require.EqualError(t, err, "payment: Config.APIKey is required")
	})

	t.Run("RefusesNegativesByField", func(t *testing.T) {
		t.Parallel()
		_, err := payment.New(&payment.Config{APIKey: "sk_test_x", Timeout: -1})
		require.EqualError(t, err, "payment: Config.Timeout must not be negative, got -1ns")
		retries := int64(-1)
		_, err = payment.New(&payment.Config{APIKey: "sk_test_x", MaxNetworkRetries: &retries})
		require.EqualError(t, err, "payment: Config.MaxNetworkRetries must not be negative, got -1")
	})

	t.Run("ZeroFieldsTakeDefaults", func(t *testing.T) {
		t.Parallel()
		g, err := payment.New(&payment.Config{APIKey: "sk_test_x"})
		require.NoError(t, err)
		require.NotNil(t, g)
	})
}

// TestOutcomeOf pins the one place where Stripe's errors are sorted by
// what to do next; the ride and the Stripe metrics both use it.
func TestOutcomeOf(t *testing.T) {
	t.Parallel()

	declined := fmt.Errorf("create charge: %w", &payment.DeclinedError{Message: "Your card was declined.", Code: "card_declined"})
	rejected := fmt.Errorf("create charge: %w", &payment.RejectedError{Message: "No such customer", Status: 400})
	unknown := fmt.Errorf("create charge: %w: %w", payment.ErrUnavailable, payment.ErrOutcomeUnknown)
	for _, tc := range []struct {
		name    string
		err     error
		outcome payment.Outcome
		message string
	}{
		{"Nil", nil, payment.Succeeded, ""},
		{"Declined", declined, payment.Declined, "Your card was declined."},
		{"Rejected", rejected, payment.Rejected, "No such customer"},
		{"Unavailable", fmt.Errorf("create charge: %w", payment.ErrUnavailable), payment.Unavailable, ""},
		{"OutcomeUnknownIsUnavailable", unknown, payment.Unavailable, ""},
		{"AnythingElseIsUnavailable", errors.New("connection reset"), payment.Unavailable, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.outcome, payment.OutcomeOf(tc.err))
			require.Equal(t, tc.message, payment.Message(tc.err))
		})
	}
	require.Equal(t, "declined", payment.Declined.String(), "the metrics' outcome label")
}

func TestConfigFromEnv(t *testing.T) {
	t.Run("RefusesAZeroTimeoutByName", func(t *testing.T) {
		t.Setenv("STRIPE_API_KEY", "sk_test_x")
		t.Setenv("STRIPE_TIMEOUT", "0")
		var env config.Env
		payment.ConfigFromEnv(&env)
		require.ErrorContains(t, env.Err(), "STRIPE_TIMEOUT=0: must be positive")
	})

	// STRIPE_TIMEOUT=1ns used to start: every charge would have been cut
	// off after Stripe may have made it.
	t.Run("RefusesATimeoutBelowItsFloor", func(t *testing.T) {
		t.Setenv("STRIPE_API_KEY", "sk_test_x")
		t.Setenv("STRIPE_API_BASE", "")
		for _, v := range []string{"1ns", "20ms", "999ms"} {
			t.Setenv("STRIPE_TIMEOUT", v)
			var env config.Env
			payment.ConfigFromEnv(&env)
			require.ErrorContains(t, env.Err(), "STRIPE_TIMEOUT="+v+": must be at least 1s")
		}
		t.Setenv("STRIPE_TIMEOUT", "1s")
		var env config.Env
		require.Equal(t, payment.MinTimeout, payment.ConfigFromEnv(&env).Timeout)
		require.NoError(t, env.Err())
	})

	// STRIPE_API_BASE=ftp://x used to start, and fail on the first charge.
	t.Run("RefusesABaseThatIsNotHTTP", func(t *testing.T) {
		t.Setenv("STRIPE_API_KEY", "sk_test_x")
		t.Setenv("STRIPE_TIMEOUT", "")
		for _, base := range []string{"ftp://x", "file://localhost/etc", "ws://127.0.0.1:12111", "smtp://user:hunter2@mail"} {
			t.Setenv("STRIPE_API_BASE", base)
			var env config.Env
			payment.ConfigFromEnv(&env)
			err := env.Err()
			require.ErrorContains(t, err, "STRIPE_API_BASE=", base)
			require.ErrorContains(t, err, ": must be an http:// or https:// URL", base)
			require.NotContains(t, err.Error(), "hunter2")
		}
		_, err := payment.New(&payment.Config{APIKey: "sk_test_x", BaseURL: "ftp://x"})
		require.ErrorContains(t, err, "payment: Config.BaseURL must be an http:// or https:// URL")
	})

	t.Run("UnsetTimeoutIsTheDefault", func(t *testing.T) {
		t.Setenv("STRIPE_API_KEY", "sk_test_x")
		t.Setenv("STRIPE_TIMEOUT", "")
		var env config.Env
		cfg := payment.ConfigFromEnv(&env)
		require.NoError(t, env.Err())
		require.Equal(t, payment.DefaultTimeout, cfg.Timeout)
	})
}

// TestChargeIsSentWithItsLength pins a charge's request to Stripe as one
// body of known length: stripe-go leaves the length unsaid, and net/http
// would send the body chunked, in three writes instead of one.
func TestChargeIsSentWithItsLength(t *testing.T) {
	t.Parallel()
	fake, err := fakestripe.New(nil)
	require.NoError(t, err)
	type seen struct {
		contentLength    int64
		transferEncoding []string
		body             int
	}
	requests := make(chan seen, 1)
	stripe := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if r.URL.Path == "/v1/charges" {
			requests <- seen{r.ContentLength, r.TransferEncoding, len(body)}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(stripe.Close)

	g, customer := gatewayWithCustomer(t, stripe.URL)
	chargeID, err := g.Charge(t.Context(), payment.ChargeRequest{
		Customer: customer, Amount: 2000, Currency: "usd", Description: "a ride",
		Metadata: map[string]string{"ride_id": "1"}, IdempotencyKey: "rocket-rides-length",
	})
	require.NoError(t, err)
	require.NotEmpty(t, chargeID)
	got := <-requests
	require.Empty(t, got.transferEncoding, "not chunked")
	require.Positive(t, got.body)
	require.Equal(t, int64(got.body), got.contentLength)
}

// gatewayWithCustomer is a Gateway to the Stripe at url and a customer
// made there with a card that charges.
func gatewayWithCustomer(t testing.TB, url string) (*payment.Gateway, string) {
	t.Helper()
	config := &payment.Config{APIKey: "sk_test_payment", BaseURL: url}
	api, err := payment.NewStripeClient(config)
	require.NoError(t, err)
	customer, err := api.Customers.New(&stripego.CustomerParams{Source: stripego.String("tok_visa")})
	require.NoError(t, err)
	g, err := payment.New(config)
	require.NoError(t, err)
	return g, customer.ID
}

// fakeWithCustomer is a Stripe fake, a Gateway to it and a customer
// with a card.
func fakeWithCustomer(t *testing.T) (*fakestripe.Server, *payment.Gateway, string) {
	t.Helper()
	fake, err := fakestripe.New(nil)
	require.NoError(t, err)
	stripe := httptest.NewServer(fake)
	t.Cleanup(stripe.Close)
	g, customer := gatewayWithCustomer(t, stripe.URL)
	return fake, g, customer
}

// Charge reads only the id of what Stripe created: it must be the id of
// the one charge made, as it is for a repeat under the same key.
func TestChargeReturnsTheChargesID(t *testing.T) {
	t.Parallel()
	fake, g, customer := fakeWithCustomer(t)
	req := payment.ChargeRequest{Customer: customer, Amount: 2000, Currency: "usd", IdempotencyKey: "rocket-rides-id"}

	first, err := g.Charge(t.Context(), req)
	require.NoError(t, err)
	again, err := g.Charge(t.Context(), req)
	require.NoError(t, err)

	charges := fake.Charges()
	require.Len(t, charges, 1)
	require.Equal(t, charges[0].ID, first.ID)
	require.False(t, first.Replayed, "the first answer is a new charge")
	require.Equal(t, first.ID, again.ID)
	require.True(t, again.Replayed, "the second is Stripe's replay of it")
}

// A Stripe key sent again with other parameters is refused, and the
// refusal says so: the caller must not charge under another key.
func TestChargeRefusesAKeyUsedWithOtherParameters(t *testing.T) {
	t.Parallel()
	fake, g, customer := fakeWithCustomer(t)
	req := payment.ChargeRequest{Customer: customer, Amount: 2000, Currency: "usd", IdempotencyKey: "rocket-rides-reused"}
	_, err := g.Charge(t.Context(), req)
	require.NoError(t, err)

	req.Amount = 3000
	_, err = g.Charge(t.Context(), req)
	require.ErrorIs(t, err, payment.ErrKeyConflict)
	require.Equal(t, payment.Rejected, payment.OutcomeOf(err))
	require.Len(t, fake.Charges(), 1)
}

// Metadata added to a charge afterwards changes the charge's metadata
// and nothing else: no charge is made.
func TestAddMetadata(t *testing.T) {
	t.Parallel()
	fake, g, customer := fakeWithCustomer(t)
	charge, err := g.Charge(t.Context(), payment.ChargeRequest{Customer: customer, Amount: 2000, Currency: "usd",
		Metadata: map[string]string{"user_id": "7"}, IdempotencyKey: "rocket-rides-tagged"})
	require.NoError(t, err)

	require.NoError(t, g.AddMetadata(t.Context(), charge.ID, map[string]string{"ride_id": "42"}))
	charges := fake.Charges()
	require.Len(t, charges, 1)
	require.Equal(t, map[string]string{"user_id": "7", "ride_id": "42"}, charges[0].Metadata)
	require.Equal(t, int64(2000), charges[0].Amount)

	err = g.AddMetadata(t.Context(), "ch_missing", map[string]string{"ride_id": "42"})
	require.Equal(t, payment.Rejected, payment.OutcomeOf(err))
}

// A charge whose attempt outlives Config.Timeout is given up as
// unavailable, its outcome unknown to the caller, rather than waited for.
func TestChargeTimesOut(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	stalled := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	t.Cleanup(stalled.Close)
	t.Cleanup(func() { close(release) }) // before Close, which waits for the handler
	g, err := payment.New(&payment.Config{APIKey: "sk_test_payment", BaseURL: stalled.URL,
		Timeout: 50 * time.Millisecond, MaxNetworkRetries: stripego.Int64(0)})
	require.NoError(t, err)
	_, err = g.Charge(t.Context(), payment.ChargeRequest{Customer: "cus_1", Amount: 2000, Currency: "usd", IdempotencyKey: "rocket-rides-1"})
	// The bound is the 50 ms asked for, not DefaultTimeout's 20 s: the
	// gateway's transport is built with it (TestGatewayBoundsEachAttempt).
	require.ErrorIs(t, err, payment.ErrUnavailable)
}

// BenchmarkCharge is one charge through the Gateway, at the Stripe fake
// over loopback HTTP: what a ride's charge costs a process, the fake's
// own share (it serves in the same process) included.
//
//	go test -run XXX -bench Charge -benchmem ./internal/payment
func BenchmarkCharge(b *testing.B) {
	fake, err := fakestripe.New(nil)
	require.NoError(b, err)
	stripe := httptest.NewServer(fake)
	b.Cleanup(stripe.Close)
	g, customer := gatewayWithCustomer(b, stripe.URL)
	b.ReportAllocs()
	for n := 0; b.Loop(); n++ {
		req := payment.ChargeRequest{Customer: customer, Amount: 2000, Currency: "usd", IdempotencyKey: fmt.Sprintf("bench-%d", n)}
		if _, err := g.Charge(b.Context(), req); err != nil {
			b.Fatal(err)
		}
	}
}

// Only a loopback host is known not to be Stripe, or a route to it.
func TestStandIn(t *testing.T) {
	t.Parallel()
	for base, want := range map[string]bool{
		"":                               false,
		"https://api.stripe.com":         false,
		"http://fakestripe:12111":        false,
		"https://stripe-proxy.internal":  false,
		"http://10.0.0.7:12111":          false,
		"http://127.0.0.1.nip.io:12111":  false,
		"ftp://127.0.0.1":                false,
		"http://127.0.0.1:12111":         true,
		"http://127.9.9.9:12111":         true,
		"http://localhost:12111":         true,
		"http://LocalHost:12111":         true,
		"http://[::1]:12111":             true,
		"https://127.0.0.1:12112/prefix": true,
		// Decided by parsing the address, not by a list of names.
		"https://127.0.0.2:12112":            true,
		"http://[::ffff:127.0.0.1]:12111":    true,
		"http://[0:0:0:0:0:0:0:1]:12111":     true,
		"http://localhost.evil.example:1211": false,
		"http://[::ffff:10.0.0.7]:12111":     false,
	} {
		require.Equal(t, want, payment.StandIn(base), base)
	}
}
