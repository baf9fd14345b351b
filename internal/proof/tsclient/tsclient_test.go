package tsclient_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/project"
	"github.com/rocketrides/rocketrides/internal/proof/clientcheck"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet/fleettest"
)

// TestTypeScriptClient builds client-ts and runs its node tests against a
// real api. The conformance harness checks its command with the project's
// other clients (clientcheck's TestProjectClients).
func TestTypeScriptClient(t *testing.T) {
	t.Parallel()
	dir := build(t)

	t.Run("NodeTests", func(t *testing.T) {
		t.Parallel()
		token, declined := "ts-"+uuid.NewString(), "ts-declined-"+uuid.NewString()
		f := fleettest.New(t, "DATABASE_URL="+dbtest.NewURL(t), "STRIPE_API_KEY=sk_test_tsclient")
		stripe := fleettest.Start(t, f, "fakestripe")
		f.AddEnv("STRIPE_API_BASE=" + stripe.URL)
		fleettest.Run(t, f, "seed", []string{"SEED_USER_TOKEN=" + token, "SEED_BAD_SOURCE_TOKEN=" + declined})
		api := fleettest.Start(t, f, "api")

		tests, err := filepath.Glob(filepath.Join(dir, "dist", "test", "*.test.js"))
		require.NoError(t, err)
		out := run(t, dir, []string{
			"RIDES_URL=" + api.URL, "RIDES_TOKEN=" + token, "RIDES_DECLINED_TOKEN=" + declined, "RIDES_STRIPE_URL=" + stripe.URL,
		}, "node", append([]string{"--test"}, tests...)...)
		// The runner's summary: every test ran, and the api's among them.
		require.Regexp(t, regexp.MustCompile(`(?m)^# fail 0$`), out)
		pass := regexp.MustCompile(`(?m)^# pass (\d+)$`).FindStringSubmatch(out)
		require.NotNil(t, pass, out)
		n, _ := strconv.Atoi(pass[1])
		require.GreaterOrEqual(t, n, 30, "tests that passed")
		require.Contains(t, out, "resumes a ride from its journal after the process died mid-request")
	})
}

// build prepares client-ts as the conformance harness does (npm ci, once
// per change of its package-lock.json, then npm run build), and returns
// its directory.
func build(t *testing.T) string {
	t.Helper()
	root, err := project.Root()
	require.NoError(t, err)
	for _, tool := range []string{"node", "npm"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "%s is needed to test client-ts (.ci/run installs it with apt-get)", tool)
	}
	ts, ok := clientcheck.ProjectClientNamed("typescript")
	require.True(t, ok)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := ts.Prepare(ctx, root, t.TempDir())
	require.NoError(t, err)
	return c.Dir
}

// run runs name with args in dir, with env on top of this process's
// environment, and returns its output; a failure fails the test with it.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s %s: %s", name, strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	require.NoError(t, err, "%s %s in %s:\n%s", name, strings.Join(args, " "), dir, out.String())
	return out.String()
}
