package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
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
		require.Equal(t, 2, resolve(nil, io.Discard, io.Discard))
		require.Equal(t, 2, resolve([]string{"refund", "-key", "1", "-operator", "ada"}, io.Discard, io.Discard))
		require.Equal(t, 2, resolve([]string{"adopt", "-operator", "ada"}, io.Discard, io.Discard))
		require.Equal(t, 2, resolve([]string{"adopt", "-key", "1"}, io.Discard, io.Discard))
	})

	// A key id that cannot be one, or a name the audit record would
	// refuse (rides.ValidOperator), is a usage error that says which
	// flag, before the database is opened.
	t.Run("ResolveNamesTheBadFlag", func(t *testing.T) {
		setEnv(t, "DATABASE_URL", "postgres://127.0.0.1:1/unreachable")
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"adopt", "-operator", "ada"}, "-key must be a positive key id"},
			{[]string{"adopt", "-key", "-3", "-operator", "ada"}, "-key must be a positive key id"},
			{[]string{"adopt", "-key", "1", "-operator", "  "}, "-operator: the operator's name is required"},
			{[]string{"close", "-key", "1", "-operator", strings.Repeat("a", rides.MaxOperatorLength+1)},
				"-operator: the operator's name has 101 characters, at most 100"},
			{[]string{"release", "-key", "1", "-operator", "ada\nroot"},
				"-operator: the operator's name holds a control or formatting character"},
		} {
			var stderr bytes.Buffer
			require.Equal(t, 2, resolve(tc.args, io.Discard, &stderr), "%q", tc.args)
			require.Contains(t, stderr.String(), tc.want, "%q", tc.args)
		}
	})

	// The command settles as the console's buttons do, through the same
	// service: Stripe holds no charge for this key set aside, so adopting
	// is refused and closing it as failed is not, once.
	t.Run("ResolveSettlesAKeySetAside", func(t *testing.T) {
		b := apitest.New(t, apitest.Options{MaxChargeAttempts: 1})
		b.Stripe.SetFaults(fakestripe.Faults{StoreFailureNext: 1})
		key := apitest.NewKey()
		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusBadGateway, resp.Status, "%s", resp.Body)
		id := strconv.FormatInt(b.KeyRow(t, key).ID, 10)
		setEnv(t, "DATABASE_URL", b.Pool.Config().ConnString(), "STRIPE_API_BASE", b.StripeURL)

		require.Equal(t, 1, resolve([]string{"adopt", "-key", id, "-operator", "ada"}, io.Discard, io.Discard), "Stripe holds no charge to adopt")
		var stdout bytes.Buffer
		require.Equal(t, 0, resolve([]string{"close", "-key", id, "-operator", "ada"}, &stdout, io.Discard))
		require.Equal(t, "key "+id+": Closed as failed: the ride failed and the request's answer is stored.\n", stdout.String(),
			"what the console says of its button")
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides r JOIN idempotency_keys k ON k.id = r.idempotency_key_id
			WHERE k.idempotency_key = $1 AND r.status = 'failed' AND k.recovery_point = 'finished'`, key))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE data->>'operator' = 'ada'`))
		require.Equal(t, 1, resolve([]string{"close", "-key", id, "-operator", "ada"}, io.Discard, io.Discard), "a finished key has nothing to settle")
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
