// Package proctest tests a command's build step (process.Config.Build):
// what it makes of the settings in its environment, and how the process
// explains them (-help, the start line, a mistyped variable).
package proctest

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/process"
	"github.com/rocketrides/rocketrides/internal/platform/trace"
)

// Build is a command's build step.
type Build = func(ctx context.Context, env *config.Env, logger *slog.Logger) (*process.Program, error)

// Setenv sets each NAME, value pair for the rest of the test. Like
// t.Setenv, it rules out t.Parallel.
func Setenv(t testing.TB, pairs ...string) {
	t.Helper()
	require.Zero(t, len(pairs)%2, "Setenv takes NAME, value pairs")
	for i := 0; i < len(pairs); i += 2 {
		t.Setenv(pairs[i], pairs[i+1])
	}
}

// RequireRefused builds with the environment as it is and requires the
// build to fail with an error naming each of wants.
func RequireRefused(t testing.TB, build Build, wants ...string) {
	t.Helper()
	program, err := build(t.Context(), &config.Env{}, slog.New(slog.DiscardHandler))
	if program != nil && program.Close != nil {
		program.Close()
	}
	require.Error(t, err)
	for _, want := range wants {
		require.ErrorContains(t, err, want)
	}
}

// helpSetting is a setting's first line in -help's output.
var helpSetting = regexp.MustCompile(`(?m)^  ([A-Z][A-Z0-9_]*) \(`)

// secrets are set, each a value that must never be logged, by
// TestSettings's start-line test.
var secrets = []string{
	"STRIPE_API_KEY", "sk_test_secret_stripe_key_4242",
	"DATABASE_URL", "postgres://rocketrides:db-password-4242@127.0.0.1:1/none?sslmode=disable",
	"SMTP_URL", "smtp://mailer:smtp-password-4242@127.0.0.1:1",
	"SIMULATOR_TOKEN", "rr_secret_simulator_token_4242",
	"SEED_USER_TOKEN", "rr_secret_seed_token_4242",
}

// TestSettings tests how the process command explains its
// settings, with env (NAME, value pairs) an environment its build
// succeeds in (lazy connections to nowhere are fine, PORT=0 for a
// listener):
//
//   - -help lists every setting a real build reads (recorded by the
//     config.Env it reads them through, not listed by hand), and those
//     process.Main reads for every process;
//   - a variable one letter off a setting it reads stops it at start,
//     naming the setting;
//   - the secrets it is given never reach its start line.
//
// command returns a fresh config of the command (its main's).
func TestSettings(t *testing.T, command func() *process.Config, env ...string) {
	t.Run("HelpListsEverySettingItReads", func(t *testing.T) {
		Setenv(t, env...)
		var stdout, stderr bytes.Buffer
		require.Zero(t, process.Run(t.Context(), command(), []string{"-help"}, &stdout, &stderr), stderr.String())
		var listed []string
		for _, m := range helpSetting.FindAllStringSubmatch(stderr.String(), -1) {
			listed = append(listed, m[1])
		}

		real := &config.Env{}
		program, err := command().Build(t.Context(), real, slog.New(slog.DiscardHandler))
		require.NoError(t, err, "the build succeeds in the test's environment")
		if program.Close != nil {
			program.Close()
		}
		var read []string
		for _, r := range real.Reads() {
			read = append(read, r.Name)
		}
		require.NotEmpty(t, read)
		for _, s := range append(config.Variables, trace.Variables...) { // what process.Main reads
			read = append(read, s.Name)
		}
		require.ElementsMatch(t, read, listed, "-help lists what the process reads:\n%s", stderr.String())
		require.Contains(t, stderr.String(), "docs/configuration.md")
	})

	t.Run("AMistypedSettingStopsIt", func(t *testing.T) {
		Setenv(t, env...)
		reads, err := process.Describe(t.Context(), command())
		require.NoError(t, err)
		i := slices.IndexFunc(reads, func(r config.Read) bool {
			return r.Prefix() != "" && !slices.Contains(config.Variables, r.Setting)
		})
		require.GreaterOrEqual(t, i, 0, "the process reads a setting with a prefix")
		name := reads[i].Name
		typo := name + "S"
		t.Setenv(typo, "1")
		var stdout, stderr bytes.Buffer
		require.NotZero(t, process.Run(t.Context(), command(), nil, &stdout, &stderr))
		require.Contains(t, stderr.String(), typo+" is not a setting of any Rocket Rides process; did you mean "+name+"?")
		require.NotContains(t, stderr.String(), "Started")
	})

	t.Run("SecretsNeverReachTheStartLine", func(t *testing.T) {
		Setenv(t, env...)
		Setenv(t, secrets...)
		// A process that checks its database at start (db.Preflight)
		// needs the one env gives it: the same URL, with a password that
		// the project's clusters (trust authentication) ignore.
		if i := slices.Index(env, "DATABASE_URL"); i >= 0 && i%2 == 0 {
			if u, err := url.Parse(env[i+1]); err == nil && u.Port() != "1" {
				u.User = url.UserPassword(u.User.Username(), "db-password-4242")
				t.Setenv("DATABASE_URL", u.String())
			}
		}
		// Stopped as soon as it has started: the start line is logged,
		// then Run returns.
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var stdout bytes.Buffer
		stderr := &stopAtStart{cancel: cancel}
		process.Run(ctx, command(), nil, &stdout, stderr)
		logs := stderr.String()
		require.Contains(t, logs, "msg=Started", "the start line")
		line := logs[strings.Index(logs, "msg=Started"):]
		line, _, _ = strings.Cut(line, "\n")
		require.Contains(t, line, "log_level=info", "every setting in effect is on the start line")
		for _, secret := range []string{"secret_stripe_key", "db-password", "smtp-password", "secret_simulator_token", "secret_seed_token"} {
			require.NotContains(t, logs, secret)
		}
	})
}

// stopAtStart is a process's stderr that cancels the process once its
// start line is written.
type stopAtStart struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	cancel context.CancelFunc
}

func (w *stopAtStart) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if bytes.Contains(w.buf.Bytes(), []byte("msg=Started")) {
		w.cancel()
	}
	return n, err
}

func (w *stopAtStart) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
