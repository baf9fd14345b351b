package db_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
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

// TestPreflightReplication runs a Patroni cluster of its own (localpg
// ha, on the second block of scratch ports): synchronous first, through
// the moments of its life, then made asynchronous, then strict.
func TestPreflightReplication(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs etcd and two Patroni nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	h := scratchHA(ctx, t, "preflight", 1)
	url := h.DatabaseURL("postgres")
	// check runs the preflight on a pool of its own. It reports rather than
	// fails: the probes below call it from goroutines of their own.
	check := func(cfg db.PreflightConfig, params ...string) error {
		pool, err := db.Open(ctx, url+strings.Join(params, ""), 2)
		if err != nil {
			return fmt.Errorf("open a pool: %w", err)
		}
		defer pool.Close()
		return db.Preflight(ctx, pool, cfg)
	}

	// A healthy cluster in synchronous mode is accepted at every moment:
	// while the standby dies, the leader writes on alone, the standby comes
	// back behind and catches up (asynchronous until Patroni names it
	// again), then the leader dies, the standby is promoted, and the old
	// leader rewinds and rejoins. A check runs at each of those moments,
	// and others start every half second in between, whenever they fall.
	var (
		probes  sync.WaitGroup
		mu      sync.Mutex
		refused []string
		checks  int
	)
	probe := func(moment string) {
		err := check(db.PreflightConfig{})
		mu.Lock()
		defer mu.Unlock()
		checks++
		if err != nil {
			refused = append(refused, moment+": "+err.Error())
		}
	}
	stopProbing := make(chan struct{})
	probes.Go(func() {
		for {
			select {
			case <-stopProbing:
				return
			case <-time.After(500 * time.Millisecond):
			}
			probes.Go(func() { probe("between the moments") })
		}
	})
	leader, err := h.Leader(ctx)
	require.NoError(t, err)
	standby := h.Other(leader)
	require.NoError(t, standby.Kill())
	probe("the standby dead")
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE catch_up AS SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 200000) g")
	require.NoError(t, err, "writes go on without the standby")
	require.NoError(t, conn.Close(ctx))
	probe("the leader written on alone")
	require.NoError(t, standby.Start(ctx))
	probe("the standby back, behind")
	require.NoError(t, standby.Await(ctx, "/sync"))
	probe("the standby synchronous again")
	require.NoError(t, leader.Kill())
	probe("the leader dead")
	_, err = h.AwaitLeader(ctx)
	require.NoError(t, err)
	probe("the standby promoted")
	require.NoError(t, leader.Start(ctx))
	probe("the old leader back")
	require.NoError(t, leader.Await(ctx, "/sync"))
	probe("the old leader synchronous")
	close(stopProbing)
	probes.Wait()
	require.Empty(t, refused, "of %d checks", checks)

	err = check(db.PreflightConfig{}, "&synchronous_commit=local")
	require.ErrorContains(t, err, "DATABASE_ALLOW_ASYNC_REPLICATION: synchronous_commit is local for our sessions")

	// Asynchronous: the standby streams, synchronous_standby_names stays
	// empty, and the check believes it once it has lasted.
	require.NoError(t, h.PatchConfig(ctx, map[string]any{"synchronous_mode": false}))
	require.Eventually(t, func() bool {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return false
		}
		defer conn.Close(ctx)
		var names string
		return conn.QueryRow(ctx, "SHOW synchronous_standby_names").Scan(&names) == nil && names == ""
	}, time.Minute, 100*time.Millisecond, "Patroni empties synchronous_standby_names")
	err = check(db.PreflightConfig{})
	require.ErrorContains(t, err, "DATABASE_ALLOW_ASYNC_REPLICATION: the primary streams to asynchronous standbys")
	require.ErrorContains(t, err, "set DATABASE_ALLOW_ASYNC_REPLICATION=true to accept the loss")
	require.NoError(t, check(db.PreflightConfig{AllowAsyncReplication: true}))

	// Strict synchronous mode: without its synchronous standby the
	// leader answers reads and holds every commit (Patroni names every
	// standby, '*'): the probe says so within its bound, and the commit
	// it left waiting does not stop the leader from taking the standby
	// back.
	require.NoError(t, h.PatchConfig(ctx, map[string]any{"synchronous_mode": true, "synchronous_mode_strict": true}))
	leader, err = h.AwaitLeader(ctx)
	require.NoError(t, err)
	standby = h.Other(leader)
	require.NoError(t, standby.Await(ctx, "/sync"))
	pool, err := db.Open(ctx, url, 2)
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, db.CheckCommits(ctx, pool, 0), "commits return while the standby streams")
	require.NoError(t, standby.Kill())
	var wait *db.CommitsWaitError
	require.Eventually(t, func() bool {
		return errors.As(db.CheckCommits(ctx, pool, 0), &wait) && wait.Standbys == "*"
	}, time.Minute, 100*time.Millisecond, "Patroni names every standby once the synchronous one is gone")
	err = db.CheckCommits(ctx, pool, 0)
	require.ErrorAs(t, err, &wait)
	require.Equal(t, "*", wait.Standbys)
	require.ErrorContains(t, err, `commits wait for a synchronous standby (synchronous_standby_names = "*")`)
	require.NoError(t, standby.Start(ctx))
	require.NoError(t, standby.Await(ctx, "/sync"))
	require.NoError(t, db.CheckCommits(ctx, pool, 0), "commits return once a standby streams again")
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// scratchHA starts a Patroni cluster of the test's own (etcd and two
// nodes, synchronous mode) on scratch block n of the ports
// (localpg.HAScratchPort), under localpg.ScratchDir(name), and stops and
// deletes it when the test ends.
func scratchHA(ctx context.Context, t *testing.T, name string, n int) *localpg.HA {
	t.Helper()
	dir, err := localpg.ScratchDir(name)
	require.NoError(t, err)
	port, err := localpg.HAScratchPort(n)
	require.NoError(t, err)
	opts := localpg.HAOptions{Dir: dir, Port: port}
	t.Cleanup(func() {
		h, err := localpg.NewHA(opts)
		require.NoError(t, err)
		require.NoError(t, h.Remove(context.Background()))
	})
	h, err := localpg.EnsureHA(ctx, opts)
	require.NoError(t, err)
	return h
}
