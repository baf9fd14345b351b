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
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/process"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/testkit/proctest"
)

// t.Setenv rules out t.Parallel in this file.

func TestBuild(t *testing.T) {
	setEnv := func(t *testing.T, env ...string) {
		t.Helper()
		// A real database: the console checks it at start (db.Preflight).
		t.Setenv("DATABASE_URL", dbtest.NewURL(t))
		t.Setenv("STRIPE_API_KEY", "sk_test_console")
		t.Setenv("HOST", "")
		t.Setenv("SIMULATED_ERRORS", "")
		t.Setenv("CONSOLE_TRUST_PROXY", "")
		t.Setenv("CONSOLE_TRACE_URL", "")
		for i := 0; i+1 < len(env); i += 2 {
			t.Setenv(env[i], env[i+1])
		}
	}

	// An operator tool over payments has no default login: it starts
	// with no account, and says how to add one.
	t.Run("StartsWithNoAccountAndSaysHowToAddOne", func(t *testing.T) {
		setEnv(t, "PORT", "0")
		var logs bytes.Buffer
		program, err := build(t.Context(), &config.Env{}, slog.New(slog.NewTextHandler(&logs, nil)))
		require.NoError(t, err)
		defer program.Close()
		require.Contains(t, logs.String(), "No operator account can log in; add one with: console operator add NAME")
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		require.NoError(t, program.Run(ctx))
	})

	// The shared password is gone: a deployment that still sets it is
	// stopped at start rather than left to believe it protects anything.
	t.Run("RefusesTheSharedPasswordSetting", func(t *testing.T) {
		setEnv(t, "PORT", "0", "CONSOLE_PASSWORD", "a")
		// Were it to start, it would serve until the context ends.
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		var stdout, stderr bytes.Buffer
		require.NotZero(t, process.Run(ctx, command(), nil, &stdout, &stderr))
		require.Contains(t, stderr.String(), "CONSOLE_PASSWORD is not a setting of any Rocket Rides process")
	})

	// A trace link with nowhere to put the trace's id would send every
	// story to the same page: refused at start, by name.
	t.Run("RefusesATraceURLWithoutTheTraceID", func(t *testing.T) {
		setEnv(t, "PORT", "0", "CONSOLE_TRACE_URL", "http://127.0.0.1:16686/search")
		_, err := build(t.Context(), &config.Env{}, slog.New(slog.DiscardHandler))
		require.ErrorContains(t, err, "CONSOLE_TRACE_URL")
		require.ErrorContains(t, err, "{trace_id}")
	})

	t.Run("ResolveRefusesBadUsage", func(t *testing.T) {
		setEnv(t)
		require.Equal(t, 2, resolve(nil, io.Discard, io.Discard))
		require.Equal(t, 2, resolve([]string{"refund", "-key", "1", "-operator", "ada"}, io.Discard, io.Discard))
		require.Equal(t, 2, resolve([]string{"adopt", "-operator", "ada"}, io.Discard, io.Discard))
		require.Equal(t, 2, resolve([]string{"adopt", "-key", "1"}, io.Discard, io.Discard))
		require.Equal(t, 2, operatorCommand(nil, strings.NewReader(""), io.Discard, io.Discard))
		require.Equal(t, 2, operatorCommand([]string{"remove", "ada"}, strings.NewReader(""), io.Discard, io.Discard))
		require.Equal(t, 2, operatorCommand([]string{"add"}, strings.NewReader(""), io.Discard, io.Discard))
		require.Equal(t, 2, operatorCommand([]string{"disable", "ada", "grace"}, strings.NewReader(""), io.Discard, io.Discard))
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
		require.Zero(t, operatorCommand([]string{"add", "ada"}, strings.NewReader("ada's long password\n"), io.Discard, io.Discard))

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

	// The audit record names an account, as the console's do: a name
	// typed for -operator without one, or of a disabled one, is refused
	// before anything is settled.
	t.Run("ResolveNeedsAnEnabledAccount", func(t *testing.T) {
		b := apitest.New(t, apitest.Options{MaxChargeAttempts: 1})
		b.Stripe.SetFaults(fakestripe.Faults{StoreFailureNext: 1})
		key := apitest.NewKey()
		require.Equal(t, http.StatusBadGateway, b.PostRide(t, key, apitest.DefaultParams).Status)
		id := strconv.FormatInt(b.KeyRow(t, key).ID, 10)
		setEnv(t, "DATABASE_URL", b.Pool.Config().ConnString(), "STRIPE_API_BASE", b.StripeURL)
		require.Zero(t, operatorCommand([]string{"add", "grace"}, strings.NewReader("grace's long password\n"), io.Discard, io.Discard))
		require.Zero(t, operatorCommand([]string{"disable", "grace"}, strings.NewReader(""), io.Discard, io.Discard))

		for _, name := range []string{"mallory", "grace"} {
			var stderr bytes.Buffer
			require.Equal(t, 2, resolve([]string{"close", "-key", id, "-operator", name}, io.Discard, &stderr), name)
			require.Contains(t, stderr.String(), "-operator: no enabled account is named \""+name+"\"", name)
		}
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides r JOIN idempotency_keys k ON k.id = r.idempotency_key_id
			WHERE k.idempotency_key = $1 AND r.status = 'needs_review'`, key), "nothing settled")
		require.Zero(t, b.Count(t, `SELECT count(*) FROM audit_records WHERE data->>'operator' IS NOT NULL`))
	})

	// The password comes on standard input; a weak one, or a bad name,
	// is a usage error naming the rule, found before the database is
	// opened. An account that exists is refused unless -reset.
	t.Run("OperatorAddsAndDisables", func(t *testing.T) {
		setEnv(t)
		run := func(stdin string, args ...string) (int, string, string) {
			var stdout, stderr bytes.Buffer
			code := operatorCommand(args, strings.NewReader(stdin), &stdout, &stderr)
			return code, stdout.String(), stderr.String()
		}
		for stdin, want := range map[string]string{
			"":                  "no password on standard input",
			"\n":                "no password on standard input",
			"a\n":               "the password has 1 characters, at least 12",
			"   \t   \n":        "the password is blank",
			"aaaaaaaaaaaa\r\n":  "the password is one character repeated",
			"two\nlines here\n": "the password holds a control character",
		} {
			code, _, stderr := run(stdin, "add", "ada")
			require.Equal(t, 2, code, "%q", stdin)
			require.Contains(t, stderr, want, "%q", stdin)
		}
		code, _, stderr := run("a long password\n", "add", "ada\nroot")
		require.Equal(t, 2, code)
		require.Contains(t, stderr, "control or formatting character")

		code, stdout, stderr := run("a long password\n", "add", "ada")
		require.Zero(t, code, stderr)
		require.Equal(t, "account \"ada\" added\n", stdout)
		code, _, stderr = run("another long password", "add", "ada")
		require.Equal(t, 1, code)
		require.Contains(t, stderr, "an account of that name exists (-reset sets its password)")
		code, stdout, _ = run("another long password", "add", "-reset", "ada")
		require.Zero(t, code)
		require.Contains(t, stdout, "password set, enabled")

		code, stdout, _ = run("", "disable", "ada")
		require.Zero(t, code)
		require.Contains(t, stdout, `account "ada" disabled since`)
		code, _, stderr = run("", "disable", "grace")
		require.Equal(t, 1, code)
		require.Contains(t, stderr, "no such account")
	})
}

// -help lists every setting the console reads (the lab's too, with
// SIMULATED_ERRORS=true), a mistyped one stops it, and its start line
// keeps the lab's token out.
func TestSettings(t *testing.T) {
	proctest.TestSettings(t, command, "DATABASE_URL", dbtest.NewURL(t), "STRIPE_API_KEY", "sk_test_console",
		"STRIPE_API_BASE", "http://127.0.0.1:1", "HOST", "", "PORT", "0", "SIMULATED_ERRORS", "true",
		"CONSOLE_TRUST_PROXY", "true", "CONSOLE_LAB_TOKEN", "rr_console_lab_secret")
}
