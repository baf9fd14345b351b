package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet/fleettest"
)

func TestFleet(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		fleet *fleet.Fleet
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{fleet: fleettest.New(t, "LOG_FORMAT=json")}
	}
	ctx := context.Background()

	// stats reads the fake's counters: an answer means the process
	// serves.
	stats := func(t *testing.T, p *fleet.Process) map[string]int {
		t.Helper()
		resp, err := http.Get(p.URL + "/_fake/stats")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var s map[string]int
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&s))
		return s
	}

	t.Run("StartsOnFreePortAndWaitsUntilReady", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := fleettest.Start(t, b.fleet, "fakestripe")
		q := fleettest.Start(t, b.fleet, "fakestripe")
		require.NotEqual(t, p.Port, q.Port)
		require.Equal(t, "fakestripe-1", p.Name)
		require.Equal(t, "fakestripe-2", q.Name)
		require.True(t, p.Running())
		require.Contains(t, stats(t, p), "charge_requests")
		require.Contains(t, p.Log(), `"msg":"Serving HTTP"`, "the output goes to the log, in the fleet's LOG_FORMAT")
	})

	t.Run("KillCrashesAndRestartServesOnSamePort", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := fleettest.Start(t, b.fleet, "fakestripe")
		pid, port := p.Pid(), p.Port

		require.NoError(t, p.Kill())
		require.False(t, p.Running())
		require.ErrorContains(t, p.ExitErr(), "signal: killed")
		_, err := http.Get(p.URL + "/_fake/stats")
		require.Error(t, err, "a killed process answers nothing")

		require.NoError(t, p.Restart(ctx))
		require.Equal(t, port, p.Port)
		require.NotEqual(t, pid, p.Pid())
		require.Equal(t, 2, p.Starts())
		require.Equal(t, 0, stats(t, p)["customers"], "a restarted fake remembers nothing")
		require.Contains(t, p.Log(), "exited: signal: killed", "the log spans both starts")
	})

	t.Run("StopShutsDownGracefully", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := fleettest.Start(t, b.fleet, "fakestripe")
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, p.Stop(stopCtx))
		require.NoError(t, p.ExitErr(), "SIGTERM lets the process exit 0")
		require.Contains(t, p.Log(), `"msg":"Stopped serving HTTP"`)
		require.NoError(t, p.Kill(), "killing a stopped process does nothing")
	})

	t.Run("RestartAppliesEnvOverrides", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := fleettest.Start(t, b.fleet, "fakestripe", "FAKESTRIPE_KEY_RETENTION=90s")
		require.Contains(t, p.Log(), `"fakestripe_key_retention":"90s"`, "the process's env wins over the fleet's")
		require.NoError(t, p.Restart(ctx, "LOG_FORMAT="))
		require.Contains(t, p.LogTail(3), `msg="Serving HTTP"`, "LOG_FORMAT= clears the fleet's setting")
		require.Contains(t, p.LogTail(3), "fakestripe_key_retention=90s", "what Restart does not override is kept")
	})

	t.Run("WaitSeesProcessExitOnItsOwn", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Without DATABASE_URL the enqueuer refuses to start.
		p := fleettest.Start(t, b.fleet, "enqueuer")
		waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.Error(t, p.Wait(waitCtx))
		require.Contains(t, p.Log(), "DATABASE_URL must be set")
	})

	t.Run("RunReturnsStdout", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		out := fleettest.Run(t, b.fleet, "enqueuer", []string{"DATABASE_URL=" + dbtest.NewURL(t)}, "-once")
		require.Equal(t, "enqueued=0", out)
	})

	t.Run("RunFailsWithLogTail", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.fleet.Run(ctx, "localpg", nil, "no-such-command")
		require.ErrorContains(t, err, "exit status 2")
		require.ErrorContains(t, err, "last lines of")
		require.ErrorContains(t, err, "pooler stop", "the tail of localpg's usage")
	})

	t.Run("RefusesUnknownCommand", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.False(t, b.fleet.Has("no-such-command"))
		_, err := b.fleet.Start(ctx, "no-such-command")
		require.ErrorContains(t, err, `no command "no-such-command"`)
	})

	t.Run("ProcessesDoNotInheritOurEnvironment", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A FAILPOINTS or PORT in the test's environment would otherwise
		// crash every api or make instances collide.
		p := fleettest.Start(t, b.fleet, "fakestripe", "FAKESTRIPE_KEY_RETENTION=1h")
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.Pid()))
		require.NoError(t, err)
		allowed := []string{"PATH", "HOME", "TMPDIR", "TZ", "USER", "LANG", "LC_ALL", "LOG_FORMAT", "FAKESTRIPE_KEY_RETENTION", "HOST", "PORT"}
		var names []string
		for _, kv := range strings.Split(strings.TrimRight(string(environ), "\x00"), "\x00") {
			name, _, _ := strings.Cut(kv, "=")
			names = append(names, name)
			require.Contains(t, allowed, name)
		}
		require.Subset(t, names, []string{"LOG_FORMAT", "FAKESTRIPE_KEY_RETENTION", "HOST", "PORT"})
		require.Contains(t, string(environ), fmt.Sprintf("PORT=%d", p.Port))
		require.Contains(t, string(environ), "HOST=127.0.0.1\x00")
	})
}
