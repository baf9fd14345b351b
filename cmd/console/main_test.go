package main

import (
	"context"
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
	setEnv := func(t *testing.T, env ...string) {
		t.Helper()
		// A real database: the console checks it at start (db.Preflight).
		t.Setenv("DATABASE_URL", dbtest.NewURL(t))
		t.Setenv("STRIPE_API_KEY", "sk_test_console")
		t.Setenv("HOST", "")
		t.Setenv("SIMULATED_ERRORS", "")
		t.Setenv("CONSOLE_PASSWORD", "")
		for i := 0; i+1 < len(env); i += 2 {
			t.Setenv(env[i], env[i+1])
		}
	}

	// An operator tool over payments has no default login.
	t.Run("RefusesToStartWithoutAPassword", func(t *testing.T) {
		setEnv(t, "PORT", "0")
		_, err := build(t.Context(), &config.Env{}, logger)
		require.ErrorContains(t, err, "CONSOLE_PASSWORD")
	})

	t.Run("ServesWithAPassword", func(t *testing.T) {
		setEnv(t, "PORT", "0", "CONSOLE_PASSWORD", "secret")
		program, err := build(t.Context(), &config.Env{}, logger)
		require.NoError(t, err)
		defer program.Close()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		require.NoError(t, program.Run(ctx))
	})

	t.Run("ResolveRefusesBadUsage", func(t *testing.T) {
		setEnv(t)
		require.Equal(t, 2, resolve(nil))
		require.Equal(t, 2, resolve([]string{"refund", "-key", "1", "-operator", "ada"}))
		require.Equal(t, 2, resolve([]string{"adopt", "-operator", "ada"}))
		require.Equal(t, 2, resolve([]string{"adopt", "-key", "1"}))
	})
}

// -help lists every setting the console reads (the lab's too, with
// SIMULATED_ERRORS=true), a mistyped one stops it, and its start line
// keeps the password and the lab's token out.
func TestSettings(t *testing.T) {
	proctest.TestSettings(t, command, "DATABASE_URL", dbtest.NewURL(t), "STRIPE_API_KEY", "sk_test_console",
		"STRIPE_API_BASE", "http://127.0.0.1:1", "HOST", "", "PORT", "0", "SIMULATED_ERRORS", "true",
		"CONSOLE_PASSWORD", "console-secret-password", "CONSOLE_LAB_TOKEN", "rr_console_lab_secret")
}
