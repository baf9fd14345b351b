package payment_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

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
