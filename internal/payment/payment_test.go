package payment_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

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

	config := &payment.Config{APIKey: "sk_test_length", BaseURL: stripe.URL}
	api, err := payment.NewStripeClient(config)
	require.NoError(t, err)
	customer, err := api.Customers.New(&stripego.CustomerParams{Source: stripego.String("tok_visa")})
	require.NoError(t, err)
	g, err := payment.New(config)
	require.NoError(t, err)
	chargeID, err := g.Charge(t.Context(), payment.ChargeRequest{
		Customer: customer.ID, Amount: 2000, Currency: "usd", Description: "a ride",
		Metadata: map[string]string{"ride_id": "1"}, IdempotencyKey: "rocket-rides-length",
	})
	require.NoError(t, err)
	require.NotEmpty(t, chargeID)
	got := <-requests
	require.Empty(t, got.transferEncoding, "not chunked")
	require.Positive(t, got.body)
	require.Equal(t, int64(got.body), got.contentLength)
}
