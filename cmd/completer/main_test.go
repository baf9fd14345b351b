package main

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/testkit/proctest"
)

// t.Setenv rules out t.Parallel in this file.

func TestBuild(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)

	setEnv := func(t *testing.T, databaseURL string, env ...string) {
		t.Helper()
		t.Setenv("DATABASE_URL", databaseURL)
		t.Setenv("STRIPE_API_KEY", "sk_test_completer")
		proctest.Setenv(t, env...)
	}

	t.Run("RefusesZeroNamingEachSetting", func(t *testing.T) {
		setEnv(t, "postgres://127.0.0.1:1/none",
			"COMPLETER_MIN_AGE", "0s",
			"COMPLETER_RETRY_INTERVAL", "0s",
			"COMPLETER_POLL_INTERVAL", "0s",
			"COMPLETER_BATCH_SIZE", "0",
			"COMPLETER_CONCURRENCY", "0",
			"IDEMPOTENCY_LOCK_TIMEOUT", "0s",
			"STRIPE_KEY_RETENTION", "0s",
			"MAX_CHARGE_ATTEMPTS", "0",
			"STRIPE_TIMEOUT", "0s")
		proctest.RequireRefused(t, build,
			"COMPLETER_MIN_AGE=0s: must be positive",
			"COMPLETER_RETRY_INTERVAL=0s: must be positive",
			"COMPLETER_POLL_INTERVAL=0s: must be positive",
			"COMPLETER_BATCH_SIZE=0: must be positive",
			"COMPLETER_CONCURRENCY=0: must be positive",
			"IDEMPOTENCY_LOCK_TIMEOUT=0s: must be positive",
			"STRIPE_KEY_RETENTION=0s: must be positive",
			"MAX_CHARGE_ATTEMPTS=0: must be positive",
			"STRIPE_TIMEOUT=0s: must be positive")
	})

	t.Run("RefusesNegatives", func(t *testing.T) {
		setEnv(t, "postgres://127.0.0.1:1/none",
			"COMPLETER_MIN_AGE", "-1m",
			"COMPLETER_BATCH_SIZE", "-1")
		proctest.RequireRefused(t, build, "COMPLETER_MIN_AGE=-1m: must be positive", "COMPLETER_BATCH_SIZE=-1: must be positive")
	})

	t.Run("RequiresTheDatabase", func(t *testing.T) {
		setEnv(t, "")
		proctest.RequireRefused(t, build, "DATABASE_URL must be set")
	})

	t.Run("BuildsAndWorksABatch", func(t *testing.T) {
		setEnv(t, dbtest.NewURL(t), "COMPLETER_MIN_AGE", "1ms")
		program, err := build(t.Context(), &config.Env{}, logger)
		require.NoError(t, err)
		defer program.Close()
		summary, err := program.Once(t.Context())
		require.NoError(t, err)
		require.Equal(t, "succeeded=0 failed=0", summary)
	})
}

// -help lists every setting completer reads, a mistyped one stops it, and its
// start line keeps secrets out.
func TestSettings(t *testing.T) {
	proctest.TestSettings(t, command, "DATABASE_URL", dbtest.NewURL(t), "STRIPE_API_KEY", "sk_test_completer")
}
