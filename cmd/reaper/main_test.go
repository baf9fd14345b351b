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
		proctest.Setenv(t, env...)
	}

	t.Run("RefusesZeroNamingEachSetting", func(t *testing.T) {
		setEnv(t, "postgres://127.0.0.1:1/none",
			"REAPER_MAX_AGE", "0s",
			"REAPER_BATCH_SIZE", "0",
			"REAPER_POLL_INTERVAL", "0s",
			"REAPER_DUTY_CYCLE", "0",
			"IDEMPOTENCY_LOCK_TIMEOUT", "0s")
		proctest.RequireRefused(t, build,
			"REAPER_MAX_AGE=0s: must be positive",
			"REAPER_BATCH_SIZE=0: must be positive",
			"REAPER_POLL_INTERVAL=0s: must be positive",
			"REAPER_DUTY_CYCLE=0: must be above 0 and at most 1",
			"IDEMPOTENCY_LOCK_TIMEOUT=0s: must be positive")
	})

	t.Run("RefusesNegativesAndOutOfRange", func(t *testing.T) {
		setEnv(t, "postgres://127.0.0.1:1/none",
			"REAPER_MAX_AGE", "-72h",
			"REAPER_DUTY_CYCLE", "2")
		proctest.RequireRefused(t, build, "REAPER_MAX_AGE=-72h: must be positive", "REAPER_DUTY_CYCLE=2: must be above 0 and at most 1")
	})

	// IDEMPOTENCY_LOCK_TIMEOUT=1ns used to start; the reaper must agree
	// with the api on it, so it refuses it the same way.
	t.Run("RefusesALockTimeoutBelowItsFloor", func(t *testing.T) {
		setEnv(t, "postgres://127.0.0.1:1/none", "IDEMPOTENCY_LOCK_TIMEOUT", "1ns")
		proctest.RequireRefused(t, build, "IDEMPOTENCY_LOCK_TIMEOUT=1ns: must be at least 1s")
	})

	t.Run("RefusesAMaxAgeWithinTheLockTimeout", func(t *testing.T) {
		// The pool connects lazily: nothing listens at this URL.
		setEnv(t, "postgres://127.0.0.1:1/none", "REAPER_MAX_AGE", "1m", "IDEMPOTENCY_LOCK_TIMEOUT", "90s")
		proctest.RequireRefused(t, build, "IDEMPOTENCY_LOCK_TIMEOUT=90s: must be below REAPER_MAX_AGE (1m)")
	})

	t.Run("RefusesAZeroOrShortKeyRetention", func(t *testing.T) {
		setEnv(t, "postgres://127.0.0.1:1/none", "REAPED_KEY_RETENTION", "0s")
		proctest.RequireRefused(t, build, "REAPED_KEY_RETENTION=0s: must be positive")

		setEnv(t, "postgres://127.0.0.1:1/none", "REAPED_KEY_RETENTION", "48h")
		// Named by its settings, not by the Go fields they fill.
		proctest.RequireRefused(t, build, "REAPED_KEY_RETENTION=48h: must exceed REAPER_MAX_AGE (72h)")
	})

	t.Run("BuildsAndReaps", func(t *testing.T) {
		setEnv(t, dbtest.NewURL(t))
		program, err := build(t.Context(), &config.Env{}, logger)
		require.NoError(t, err)
		defer program.Close()
		summary, err := program.Once(t.Context())
		require.NoError(t, err)
		require.Equal(t, "reaped=0 abandoned=0", summary)
	})
}

// -help lists every setting reaper reads, a mistyped one stops it, and its
// start line keeps secrets out.
func TestSettings(t *testing.T) {
	proctest.TestSettings(t, command, "DATABASE_URL", "postgres://127.0.0.1:1/none")
}
