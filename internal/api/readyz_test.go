package api_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet"
)

// TestReadyz runs the api on a cluster of its own, whose settings the test
// changes: a primary told to wait for a synchronous standby that does not
// exist, which is what a synchronous primary is once its standby is gone.
func TestReadyz(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	dir, err := localpg.ScratchDir("readyz")
	require.NoError(t, err)
	port, err := fleet.FreePort()
	require.NoError(t, err)
	cluster, err := localpg.New(localpg.Options{DataDir: dir, Port: port})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cluster.Remove(context.Background())) })
	require.NoError(t, cluster.Start(ctx))
	require.NoError(t, db.MigrateUp(ctx, cluster.URL(), slog.New(slog.DiscardHandler)))
	pool, err := db.Open(ctx, cluster.URL(), 4)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var logs syncBuffer
	b := apitest.New(t, apitest.Options{Pool: pool, LogOutput: &logs})

	setStandbys := func(names string) {
		t.Helper()
		_, err := pool.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '"+names+"'")
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "SELECT pg_reload_conf()")
		require.NoError(t, err)
	}

	resp := b.Do(t, http.MethodGet, "/readyz", "")
	require.Equal(t, http.StatusOK, resp.Status)
	// One node: ready, and its commits are said to be its own alone,
	// plainly, in the body, the gauge and one log line.
	require.Equal(t, "ready\ncommits: confirmed by the primary alone (no standby)\n", string(resp.Body))
	require.Equal(t, 0.0, b.Metrics(t)["rocketrides_db_commits_confirmed_by_standby"])
	require.Equal(t, http.StatusOK, b.Do(t, http.MethodGet, "/readyz", "").Status)
	require.Len(t, logs.linesWith(`level=INFO msg="Commits confirmed by the primary alone" commits="confirmed by the primary alone (no standby)"`), 1,
		"logged once, not per check:\n%s", strings.Join(logs.lines(), "\n"))

	// Reads still answer, commits wait forever: not ready, and said why.
	// That an answer comes at all shows the probe is bounded.
	setStandbys("gone")
	require.Eventually(t, func() bool {
		resp := b.Do(t, http.MethodGet, "/readyz", "")
		if resp.Status != http.StatusServiceUnavailable {
			return false // the reload has not reached every session yet
		}
		require.Equal(t, "database_commits_waiting", resp.JSON(t)["code"])
		require.Contains(t, resp.JSON(t)["detail"], `synchronous_standby_names = "gone"`)
		return true
	}, 30*time.Second, 100*time.Millisecond)
	resp = b.Do(t, http.MethodHead, "/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, resp.Status)

	// With the wait lifted, ready again.
	setStandbys("")
	require.Eventually(t, func() bool {
		return b.Do(t, http.MethodGet, "/readyz", "").Status == http.StatusOK
	}, 30*time.Second, 100*time.Millisecond)
}
