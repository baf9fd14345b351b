package db_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
)

func TestPreflight(t *testing.T) {
	t.Parallel()

	preflight := func(t *testing.T, url string, cfg db.PreflightConfig) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pool, err := db.Open(ctx, url, 2)
		require.NoError(t, err)
		defer pool.Close()
		return db.Preflight(ctx, pool, cfg)
	}
	// pooler starts a PgBouncer of its own in front of the project's
	// cluster (other tests use it too, so this one may not stop it).
	pooler := func(t *testing.T, mode string) *localpg.Pooler {
		t.Helper()
		ctx := context.Background()
		c, err := localpg.Ensure(ctx, localpg.Options{})
		require.NoError(t, err)
		dir, err := os.MkdirTemp(c.DataDir+"/..", "pgbouncer-"+mode+"-")
		require.NoError(t, err)
		require.NoError(t, os.Chmod(dir, 0o755))
		p, err := localpg.NewPooler(localpg.PoolerOptions{Dir: dir, Port: freePort(t), UpstreamPort: c.Port, PoolMode: mode})
		require.NoError(t, err)
		t.Cleanup(func() {
			require.NoError(t, p.Stop(context.Background()))
			require.NoError(t, os.RemoveAll(dir))
		})
		require.NoError(t, p.Start(ctx))
		return p
	}
	database := func(t *testing.T, url string) string {
		t.Helper()
		i := len(url) - len("?sslmode=disable")
		j := i
		for url[j-1] != '/' {
			j--
		}
		return url[j:i]
	}

	t.Run("AcceptsOnePostgres", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, preflight(t, dbtest.NewURL(t), db.PreflightConfig{}))
	})

	t.Run("AcceptsTransactionPoolerWithoutNamedStatements", func(t *testing.T) {
		t.Parallel()
		p := pooler(t, "transaction")
		url := p.DatabaseURL(database(t, dbtest.NewURL(t)))
		require.NoError(t, preflight(t, url+"&default_query_exec_mode=cache_describe", db.PreflightConfig{}))
		require.NoError(t, preflight(t, url+"&default_query_exec_mode=describe_exec", db.PreflightConfig{}))
	})

	t.Run("RefusesNamedStatementsThroughTransactionPooler", func(t *testing.T) {
		t.Parallel()
		p := pooler(t, "transaction")
		err := preflight(t, p.DatabaseURL(database(t, dbtest.NewURL(t))), db.PreflightConfig{})
		require.ErrorContains(t, err, "DATABASE_URL: the database is behind a pooler in transaction mode")
		require.ErrorContains(t, err, "default_query_exec_mode=cache_describe")
	})

	t.Run("RefusesStatementPooler", func(t *testing.T) {
		t.Parallel()
		p := pooler(t, "statement")
		err := preflight(t, p.DatabaseURL(database(t, dbtest.NewURL(t)))+"&default_query_exec_mode=cache_describe", db.PreflightConfig{})
		require.ErrorContains(t, err, "DATABASE_URL: the database cannot run a transaction of two statements on one session")
		require.ErrorContains(t, err, "statement mode")
	})
}

// TestPreflightReplication runs a replicated pair of its own, asynchronous
// first, then made synchronous.
func TestPreflightReplication(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("initialises two clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := localpg.New(localpg.Options{})
	require.NoError(t, err)
	dir, err := os.MkdirTemp(filepath.Dir(c.DataDir), "scratch-preflight-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	opts := localpg.ReplicatedOptions{Dir: dir, Ports: [2]int{freePort(t), freePort(t)}, Async: true}
	t.Cleanup(func() {
		r, err := localpg.NewReplicated(opts)
		require.NoError(t, err)
		require.NoError(t, r.Stop(context.Background()))
		require.NoError(t, os.RemoveAll(dir))
	})
	r, err := localpg.EnsureReplicated(ctx, opts)
	require.NoError(t, err)
	url := r.DatabaseURL("postgres")
	check := func(cfg db.PreflightConfig, params ...string) error {
		pool, err := db.Open(ctx, url+strings.Join(params, ""), 2)
		require.NoError(t, err)
		defer pool.Close()
		return db.Preflight(ctx, pool, cfg)
	}

	err = check(db.PreflightConfig{})
	require.ErrorContains(t, err, "DATABASE_ALLOW_ASYNC_REPLICATION: the primary streams to asynchronous standbys")
	require.ErrorContains(t, err, "set DATABASE_ALLOW_ASYNC_REPLICATION=true to accept the loss")
	require.NoError(t, check(db.PreflightConfig{AllowAsyncReplication: true}))

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '*'")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT pg_reload_conf()")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return check(db.PreflightConfig{}) == nil }, 30*time.Second, 100*time.Millisecond,
		"a synchronous standby is accepted")

	err = check(db.PreflightConfig{}, "&synchronous_commit=local")
	require.ErrorContains(t, err, "DATABASE_ALLOW_ASYNC_REPLICATION: synchronous_commit is local for our sessions")

	// Without its synchronous standby the primary answers reads and holds
	// every commit: the probe says so within its bound, and the commit
	// it left waiting does not stop the primary from taking the
	// standby back.
	pool, err := db.Open(ctx, url, 2)
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, db.CheckCommits(ctx, pool, 0), "commits return while the standby streams")
	require.NoError(t, r.Standby().Crash())
	var wait *db.CommitsWaitError
	err = db.CheckCommits(ctx, pool, 0)
	require.ErrorAs(t, err, &wait)
	require.Equal(t, "*", wait.Standbys)
	require.ErrorContains(t, err, `commits wait for a synchronous standby (synchronous_standby_names = "*")`)
	require.NoError(t, r.Rebuild(ctx))
	require.NoError(t, db.CheckCommits(ctx, pool, 0), "commits return once a standby streams again")
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
