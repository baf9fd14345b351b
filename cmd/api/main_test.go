package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"runtime/debug"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/process"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/testkit/proctest"
)

// t.Setenv rules out t.Parallel in this file.

func TestBuild(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)

	setEnv := func(t *testing.T, env ...string) {
		t.Helper()
		// A real database: the api checks it at start (db.Preflight).
		t.Setenv("DATABASE_URL", dbtest.NewURL(t))
		t.Setenv("STRIPE_API_KEY", "sk_test_api")
		// Empty is unset, whatever the shell running the tests exports.
		t.Setenv("HOST", "")
		t.Setenv("METRICS_ADDR", "")
		for i := 0; i+1 < len(env); i += 2 {
			t.Setenv(env[i], env[i+1])
		}
	}

	t.Run("HonoursZeroPortAndPoolSize", func(t *testing.T) {
		setEnv(t, "PORT", "0", "DATABASE_MAX_CONNS", "0")
		program, err := build(t.Context(), &config.Env{}, logger)
		require.NoError(t, err)
		defer program.Close()
		// Listening on a port of the system's choosing; a shutdown
		// before the first request ends it at once.
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		require.NoError(t, program.Run(ctx))
	})

	// Everything used to listen on all interfaces, /metrics included.
	t.Run("ListensOnLoopbackByDefault", func(t *testing.T) {
		setEnv(t, "PORT", "0")
		var logs bytes.Buffer
		program, err := build(t.Context(), &config.Env{}, slog.New(slog.NewTextHandler(&logs, nil)))
		require.NoError(t, err)
		defer program.Close()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		require.NoError(t, program.Run(ctx))
		require.Contains(t, logs.String(), "server=api addr=127.0.0.1:")
		require.Empty(t, program.MetricsAddr, "no metrics listener unless METRICS_ADDR asks for one")
	})

	// Go's default GC target cost the api a tenth of its CPU per ride.
	t.Run("SetsItsGCTarget", func(t *testing.T) {
		for _, c := range []struct {
			gogc string
			want int
		}{{"", 400}, {"150", 150}, {"off", -1}} {
			setEnv(t, "PORT", "0", "GOGC", c.gogc)
			program, err := build(t.Context(), &config.Env{}, logger)
			require.NoError(t, err)
			program.Close()
			require.Equal(t, c.want, debug.SetGCPercent(100), "GOGC=%q", c.gogc)
		}
		for _, bad := range []string{"0", "-5", "lots"} {
			setEnv(t, "GOGC", bad)
			proctest.RequireRefused(t, build, `GOGC="`+bad+`": must be a positive percentage, or off`)
		}
	})

	t.Run("ServesMetricsOnMetricsAddr", func(t *testing.T) {
		setEnv(t, "PORT", "0", "HOST", "localhost", "METRICS_ADDR", "127.0.0.1:9100")
		program, err := build(t.Context(), &config.Env{}, logger)
		require.NoError(t, err)
		defer program.Close()
		require.Equal(t, "127.0.0.1:9100", program.MetricsAddr)
		require.NotNil(t, program.Metrics)
	})

	t.Run("RefusesAHostWithAPort", func(t *testing.T) {
		setEnv(t, "HOST", "0.0.0.0:5000")
		_, err := build(t.Context(), &config.Env{}, logger)
		require.ErrorContains(t, err, "HOST=0.0.0.0:5000: not an IP address or host name")
	})

	// Refused at start, not when the listener fails to open.
	t.Run("RefusesAMalformedAddressNamingIt", func(t *testing.T) {
		setEnv(t, "METRICS_ADDR", "garbage", "DEBUG_ADDR", "6060")
		_, err := build(t.Context(), &config.Env{}, logger)
		require.ErrorContains(t, err, "METRICS_ADDR=garbage: not an address")
		require.ErrorContains(t, err, "DEBUG_ADDR=6060: not an address")
	})

	t.Run("RefusesNegatives", func(t *testing.T) {
		setEnv(t, "PORT", "-1", "DATABASE_MAX_CONNS", "-1", "IDEMPOTENCY_LOCK_TIMEOUT", "0s")
		_, err := build(t.Context(), &config.Env{}, logger)
		require.ErrorContains(t, err, "PORT=-1: must be a port number")
		require.ErrorContains(t, err, "DATABASE_MAX_CONNS=-1: must not be negative")
		require.ErrorContains(t, err, "IDEMPOTENCY_LOCK_TIMEOUT=0s: must be positive")
	})

	// Each of these used to start silently, through process.Main as make
	// dev and a deployment start it: a key retention past Stripe's 24h
	// against the real Stripe, a lock or a Stripe timeout of a
	// nanosecond, and a Stripe base that is no HTTP.
	t.Run("RefusesWhatCanDoubleChargeByName", func(t *testing.T) {
		for _, tc := range []struct{ env, wants []string }{
			{[]string{"STRIPE_KEY_RETENTION", "48h"}, []string{"STRIPE_KEY_RETENTION=48h: above Stripe's 24h"}},
			{[]string{"STRIPE_KEY_RETENTION", "8760h", "STRIPE_API_BASE", "https://stripe-proxy.internal"},
				[]string{"STRIPE_KEY_RETENTION=8760h: above Stripe's 24h"}},
			{[]string{"IDEMPOTENCY_LOCK_TIMEOUT", "1ns", "STRIPE_TIMEOUT", "1ns"},
				[]string{"IDEMPOTENCY_LOCK_TIMEOUT=1ns: must be at least 1s", "STRIPE_TIMEOUT=1ns: must be at least 1s"}},
			{[]string{"STRIPE_API_BASE", "ftp://x"}, []string{"STRIPE_API_BASE=ftp://x: must be an http:// or https:// URL"}},
		} {
			setEnv(t, append([]string{"PORT", "0", "STRIPE_API_BASE", "", "STRIPE_KEY_RETENTION", "",
				"IDEMPOTENCY_LOCK_TIMEOUT", "", "STRIPE_TIMEOUT", ""}, tc.env...)...)
			var stderr bytes.Buffer
			require.Equal(t, 1, runBriefly(t, &stderr), "%q", tc.env)
			for _, want := range tc.wants {
				require.Contains(t, stderr.String(), want, "%q", tc.env)
			}
		}
		// A stand-in for Stripe on loopback may keep keys longer.
		setEnv(t, "PORT", "0", "STRIPE_KEY_RETENTION", "48h", "STRIPE_API_BASE", "http://127.0.0.1:12111")
		program, err := build(t.Context(), &config.Env{}, logger)
		require.NoError(t, err)
		program.Close()
	})

	// DATABASE_URL='postgres//user:pw@host/db' used to print the
	// password as it refused it.
	t.Run("MasksTheDatabasePasswordItRefuses", func(t *testing.T) {
		for _, url := range []string{
			"postgres//rr:hunter2@db/rides",
			"postgres:/rr:hunter2@db/rides",
			"postgres://rr:hun/ter2@db/rides",
			"postgres://rr:5432?hunter2@db/rides",
			"host=db password='hun ter2",
			"host=db password='it\\'s hunter2' sslmode=bogus",
		} {
			t.Setenv("DATABASE_URL", url)
			t.Setenv("STRIPE_API_KEY", "sk_test_api")
			var stderr bytes.Buffer
			require.Equal(t, 1, runBriefly(t, &stderr), url)
			require.Contains(t, stderr.String(), "DATABASE_URL", url)
			require.NotContains(t, stderr.String(), "hunter2", url)
			require.NotContains(t, stderr.String(), "ter2", url)
		}
	})

	// pgx's pool size is an int32: 4294967297 used to become 1.
	t.Run("RefusesAPoolSizeThatWouldWrapAround", func(t *testing.T) {
		setEnv(t, "DATABASE_MAX_CONNS", "4294967297")
		_, err := build(t.Context(), &config.Env{}, logger)
		require.ErrorContains(t, err, "DATABASE_MAX_CONNS=4294967297: must be at most 2147483647")
	})

	t.Run("RefusesAnAsyncReplicationSettingThatIsNotABool", func(t *testing.T) {
		setEnv(t, "DATABASE_ALLOW_ASYNC_REPLICATION", "maybe")
		_, err := build(t.Context(), &config.Env{}, logger)
		require.ErrorContains(t, err, "DATABASE_ALLOW_ASYNC_REPLICATION=maybe")
	})
}

// runBriefly runs the api as its main does, with the environment as it
// is, and returns its exit status: 1 when it refuses to start; 0 when it
// started, served for a few seconds and was stopped.
func runBriefly(t *testing.T, stderr io.Writer) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	return process.Run(ctx, command(), nil, io.Discard, stderr)
}

// -help lists every setting api reads, a mistyped one stops it, and its
// start line keeps secrets out.
func TestSettings(t *testing.T) {
	proctest.TestSettings(t, command, "DATABASE_URL", dbtest.NewURL(t), "STRIPE_API_KEY", "sk_test_api", "HOST", "", "PORT", "0", "METRICS_ADDR", "")
}
