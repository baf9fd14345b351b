package rides_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

func TestNewService(t *testing.T) {
	t.Parallel()

	type testBundle struct{ *apitest.Stack }
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{Stack: apitest.New(t, apitest.Options{})}
	}

	t.Run("NamesTheMissingDependency", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := rides.NewService(nil)
		require.EqualError(t, err, "rides: ServiceConfig.Pool is required")
		_, err = rides.NewService(&rides.ServiceConfig{Pool: b.Pool})
		require.EqualError(t, err, "rides: ServiceConfig.Keys is required")
		_, err = rides.NewService(&rides.ServiceConfig{Pool: b.Pool, Keys: b.Keys})
		require.EqualError(t, err, "rides: ServiceConfig.Payments is required")
	})

	t.Run("RefusesNegativesByField", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := rides.NewService(&rides.ServiceConfig{Pool: b.Pool, Keys: b.Keys, Payments: b.Gateway, StripeKeyRetention: -time.Hour})
		require.EqualError(t, err, "rides: ServiceConfig.StripeKeyRetention must not be negative, got -1h0m0s")
		_, err = rides.NewService(&rides.ServiceConfig{Pool: b.Pool, Keys: b.Keys, Payments: b.Gateway, MaxChargeAttempts: -1})
		require.EqualError(t, err, "rides: ServiceConfig.MaxChargeAttempts must not be negative, got -1")
	})

	t.Run("HandlerNamesTheMissingDependency", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := rides.NewHandler(nil)
		require.EqualError(t, err, "rides: HandlerConfig.Service is required")
		_, err = rides.NewHandler(&rides.HandlerConfig{Service: b.Service})
		require.EqualError(t, err, "rides: HandlerConfig.Pool is required")
	})
}

// An explicit 0 in the environment is refused with the variable's name,
// never taken for the default.
func TestSettingsFromEnv(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"STRIPE_KEY_RETENTION", "STRIPE_KEY_RETENTION=0: must be positive"},
		{"MAX_CHARGE_ATTEMPTS", "MAX_CHARGE_ATTEMPTS=0: must be positive"},
		{"STRIPE_TIMEOUT", "STRIPE_TIMEOUT=0: must be positive"},
	} {
		t.Run(tc.name+"Zero", func(t *testing.T) {
			t.Setenv("STRIPE_API_KEY", "sk_test_x")
			t.Setenv(tc.name, "0")
			var env config.Env
			rides.SettingsFromEnv(&env)
			require.ErrorContains(t, env.Err(), tc.want)
		})
	}

	// STRIPE_KEY_RETENTION=48h, and 8760h, used to start against the real
	// Stripe without a word: a retry on the second day would have charged
	// again, trusting Stripe to remember a key it had forgotten.
	t.Run("RefusesAKeyRetentionAboveStripesUnlessAStandIn", func(t *testing.T) {
		t.Setenv("STRIPE_API_KEY", "sk_test_x")
		for _, tc := range []struct {
			retention, base string
			refused         bool
		}{
			{"48h", "", true},
			{"8760h", "", true},
			{"24h1s", "https://api.stripe.com", true},
			{"48h", "http://fakestripe:12111", true},
			{"48h", "https://stripe-proxy.internal", true},
			{"24h", "", false},
			{"1h", "https://api.stripe.com", false},
			{"48h", "http://127.0.0.1:12111", false},
			{"48h", "http://localhost:12111", false},
			{"8760h", "http://[::1]:12111", false},
		} {
			t.Setenv("STRIPE_KEY_RETENTION", tc.retention)
			t.Setenv("STRIPE_API_BASE", tc.base)
			var env config.Env
			rides.SettingsFromEnv(&env)
			if !tc.refused {
				require.NoError(t, env.Err(), "%s against %q", tc.retention, tc.base)
				continue
			}
			require.ErrorContains(t, env.Err(), "STRIPE_KEY_RETENTION="+tc.retention+": above Stripe's 24h", "against %q", tc.base)
		}
	})

	t.Run("UnsetIsTheDefault", func(t *testing.T) {
		t.Setenv("STRIPE_API_KEY", "sk_test_x")
		for _, name := range []string{"STRIPE_KEY_RETENTION", "MAX_CHARGE_ATTEMPTS", "STRIPE_TIMEOUT"} {
			t.Setenv(name, "")
		}
		var env config.Env
		s := rides.SettingsFromEnv(&env)
		require.NoError(t, env.Err())
		require.Equal(t, rides.DefaultStripeKeyRetention, s.StripeKeyRetention)
		require.Equal(t, rides.DefaultMaxChargeAttempts, s.MaxChargeAttempts)
	})
}
