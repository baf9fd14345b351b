package localpg

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/project"
)

func TestEnsure(t *testing.T) {
	t.Parallel()

	t.Run("IsIdempotentAndConcurrentSafe", func(t *testing.T) {
		t.Parallel()
		// The project's own cluster, as every test binary uses it: several
		// callers at once must all get the same running cluster.
		clusters := ensureConcurrently(t, Options{}, 8)
		for _, c := range clusters {
			require.Equal(t, clusters[0].URL(), c.URL())
		}
		require.Equal(t, int64(1), queryInt(t, clusters[0].URL(), "SELECT 1"))
	})

	t.Run("UsesProjectDataDir", func(t *testing.T) {
		t.Parallel()
		c, err := New(Options{})
		require.NoError(t, err)
		root, err := project.Root()
		require.NoError(t, err)
		require.Equal(t, filepath.Join(root, ".data", "postgres"), c.DataDir)
		wantPort := DefaultPort
		if v := os.Getenv("LOCALPG_PORT"); v != "" {
			wantPort, err = strconv.Atoi(v)
			require.NoError(t, err)
		}
		require.Equal(t, wantPort, c.Port)
		require.Equal(t, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", wantPort), c.URL())
	})

	t.Run("RefusesUntraversableParent", func(t *testing.T) {
		t.Parallel()
		if os.Geteuid() != 0 {
			t.Skip("only root hands the cluster to another user")
		}
		// t.TempDir's directories are 0700 and owned by root: the server's
		// user cannot reach a data directory below them.
		dataDir := filepath.Join(t.TempDir(), "postgres")
		_, err := Ensure(context.Background(), Options{DataDir: dataDir, Port: freePort(t)})
		require.ErrorContains(t, err, "(mode 0700) cannot be traversed by user nobody")
	})
}

// TestClusterLifecycle runs a scratch cluster of its own, because stopping
// the project's cluster would pull it from under the tests of other
// packages running at the same time.
func TestClusterLifecycle(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("initialises a cluster")
	}
	ctx := context.Background()
	opts := scratchOptions(t)

	// From scratch, concurrently: exactly one caller may run initdb.
	c := ensureConcurrently(t, opts, 4)[0]
	running, err := c.Running(ctx)
	require.NoError(t, err)
	require.True(t, running, "running after Ensure")
	procs, err := c.Processes()
	require.NoError(t, err)
	require.Greater(t, len(procs), 1, "the postmaster and its children")
	require.True(t, c.isPostmaster(procs[0]), "the postmaster first")

	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- c.CreateDatabase(ctx, "lifecycle") })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	dbURL := c.DatabaseURL("lifecycle")
	execSQL(t, dbURL, "CREATE TABLE survives (n int); INSERT INTO survives VALUES (42)")

	t.Run("RefusesAnotherPortWhileRunning", func(t *testing.T) {
		_, err := Ensure(ctx, Options{DataDir: opts.DataDir, Port: opts.Port + 1})
		require.ErrorContains(t, err, "stop it first")
	})

	t.Run("RestartKeepsCommittedData", func(t *testing.T) {
		const startedAt = "SELECT (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint"
		before := queryInt(t, c.URL(), startedAt)
		require.NoError(t, c.Restart(ctx))
		require.Greater(t, queryInt(t, c.URL(), startedAt), before, "server start time after Restart")
		require.Equal(t, int64(42), queryInt(t, dbURL, "SELECT n FROM survives"))
	})

	t.Run("StopThenEnsureStartsAgain", func(t *testing.T) {
		require.NoError(t, c.Stop(ctx))
		running, err := c.Running(ctx)
		require.NoError(t, err)
		require.False(t, running, "running after Stop")
		procs, err := c.Processes()
		require.NoError(t, err)
		require.Empty(t, procs, "processes after Stop")
		require.NoError(t, c.Stop(ctx), "Stop of a stopped cluster")

		_, err = Ensure(ctx, opts)
		require.NoError(t, err)
		require.Equal(t, int64(42), queryInt(t, dbURL, "SELECT n FROM survives"))
	})
}

// TestDatabaseURLRefusesAMalformedOne sets DATABASE_URL to what is no
// connection string: it is refused by name, and no cluster is started in
// its place. (Not parallel: it sets the process's environment.)
func TestDatabaseURLRefusesAMalformedOne(t *testing.T) {
	t.Setenv("DATABASE_URL", "garbage")
	t.Setenv("LOCALPG_PORT", "70000") // were a cluster looked for, it would be refused first
	u, err := DatabaseURL(context.Background(), "rides")
	require.ErrorContains(t, err, "DATABASE_URL=garbage: not a postgres:// URL")
	require.Empty(t, u)
}

func TestHighestVersion(t *testing.T) {
	t.Parallel()
	dirs := []string{"/usr/lib/postgresql/9.6/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/x/bin"}
	require.Equal(t, "/usr/lib/postgresql/16/bin", highestVersion(dirs))
}

func ensureConcurrently(t *testing.T, opts Options, n int) []Cluster {
	t.Helper()
	clusters := make([]Cluster, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			clusters[i], errs[i] = Ensure(ctx, opts)
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	return clusters
}

// scratchOptions describe a throwaway cluster (ScratchDir) on a free
// port, stopped and removed when the test ends.
func scratchOptions(t *testing.T) Options {
	t.Helper()
	dir, err := ScratchDir("pg")
	require.NoError(t, err)
	opts := Options{DataDir: dir, Port: freePort(t)}
	t.Cleanup(func() {
		c, err := New(opts)
		require.NoError(t, err)
		require.NoError(t, c.Remove(context.Background()))
	})
	return opts
}

// freePort asks the kernel for a port nobody listens on. Another process
// could take it before the server binds it; the start would then fail
// loudly, not silently use the wrong server.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func queryInt(t *testing.T, dbURL, query string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int64
	require.NoError(t, conn.QueryRow(ctx, query).Scan(&n), query)
	return n
}

func execSQL(t *testing.T, dbURL, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	require.NoError(t, err, sql)
}
