package main

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/testkit/proctest"
)

// t.Setenv rules out t.Parallel in this file.

func TestBuild(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)

	t.Run("RefusesZeroNamingEachSetting", func(t *testing.T) {
		t.Setenv("DATABASE_URL", "postgres://127.0.0.1:1/none")
		t.Setenv("STRIPE_API_KEY", "sk_test_reconciler")
		t.Setenv("RECONCILER_WINDOW", "0s")
		t.Setenv("RECONCILER_INTERVAL", "0s")
		// Zero would mean reporting every charge still in flight; the
		// reconciler cannot tell it from the default yet, so it refuses.
		t.Setenv("RECONCILER_GRACE", "0s")
		t.Setenv("STRIPE_TIMEOUT", "-1s")
		_, err := build(t.Context(), &config.Env{}, logger)
		for _, want := range []string{
			"RECONCILER_WINDOW=0s: must be positive",
			"RECONCILER_INTERVAL=0s: must be positive",
			"RECONCILER_GRACE=0s: must be positive",
			"STRIPE_TIMEOUT=-1s: must be positive",
		} {
			require.ErrorContains(t, err, want)
		}
	})

	t.Run("RequiresTheDatabaseAndAStripeKey", func(t *testing.T) {
		t.Setenv("DATABASE_URL", "")
		t.Setenv("STRIPE_API_KEY", "")
		_, err := build(t.Context(), &config.Env{}, logger)
		require.ErrorContains(t, err, "DATABASE_URL must be set")
		require.ErrorContains(t, err, "STRIPE_API_KEY must be set")
	})
}

// -help lists every setting reconciler reads, a mistyped one stops it, and its
// start line keeps secrets out.
func TestSettings(t *testing.T) {
	proctest.TestSettings(t, command, "DATABASE_URL", "postgres://127.0.0.1:1/none", "STRIPE_API_KEY", "sk_test_reconciler")
}
