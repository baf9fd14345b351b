package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

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
		t.Setenv("MAIL_DIR", filepath.Join(t.TempDir(), "mail"))
		proctest.Setenv(t, env...)
	}

	t.Run("RefusesZeroNamingEachSetting", func(t *testing.T) {
		setEnv(t, "postgres://127.0.0.1:1/none",
			"WORKER_SHUTDOWN_TIMEOUT", "0s",
			"WORKER_ONCE_TIMEOUT", "0s")
		proctest.RequireRefused(t, build,
			"WORKER_SHUTDOWN_TIMEOUT=0s: must be positive",
			"WORKER_ONCE_TIMEOUT=0s: must be positive")
	})

	t.Run("RefusesNegatives", func(t *testing.T) {
		setEnv(t, "postgres://127.0.0.1:1/none",
			"WORKER_SHUTDOWN_TIMEOUT", "-1s",
			"WORKER_ONCE_TIMEOUT", "-30s")
		proctest.RequireRefused(t, build, "WORKER_SHUTDOWN_TIMEOUT=-1s: must be positive", "WORKER_ONCE_TIMEOUT=-30s: must be positive")
	})

	t.Run("RequiresTheDatabase", func(t *testing.T) {
		setEnv(t, "")
		proctest.RequireRefused(t, build, "DATABASE_URL must be set")
	})

	t.Run("RefusesABadSMTPURLNamingIt", func(t *testing.T) {
		setEnv(t, "postgres://127.0.0.1:1/none", "SMTP_URL", "http://localhost:25")
		proctest.RequireRefused(t, build, "SMTP_URL: ")
	})

	t.Run("BuildsAndWorksTheAvailableJobs", func(t *testing.T) {
		setEnv(t, dbtest.NewURL(t))
		program, err := build(t.Context(), &config.Env{}, logger)
		require.NoError(t, err)
		defer program.Close()
		summary, err := program.Once(t.Context())
		require.NoError(t, err)
		require.Equal(t, "worked=0", summary)
	})

	t.Run("RunStopsOnShutdown", func(t *testing.T) {
		setEnv(t, dbtest.NewURL(t), "WORKER_SHUTDOWN_TIMEOUT", "5s")
		env := &config.Env{}
		program, err := build(t.Context(), env, logger)
		require.NoError(t, err)
		defer program.Close()
		// What the start line says.
		require.Contains(t, env.Attrs(), slog.String("worker_shutdown_timeout", "5s"))

		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- program.Run(ctx) }()
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after its context was cancelled")
		}
	})
}

// -help lists every setting worker reads, a mistyped one stops it, and its
// start line keeps secrets out.
func TestSettings(t *testing.T) {
	proctest.TestSettings(t, command, "DATABASE_URL", "postgres://127.0.0.1:1/none", "MAIL_DIR", t.TempDir())
}
