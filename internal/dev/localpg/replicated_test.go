package localpg

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/project"
)

// TestReplicated fails a synchronous pair over twice: what the primary
// committed is on the standby it promotes, and the multi-host URL follows
// the primary without being changed.
func TestReplicated(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("initialises two clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root, err := project.Root()
	require.NoError(t, err)
	var random [4]byte
	_, err = rand.Read(random[:])
	require.NoError(t, err)
	opts := ReplicatedOptions{
		Dir:   filepath.Join(root, ".data", "scratch-replicated-"+hex.EncodeToString(random[:])),
		Ports: [2]int{freePort(t), freePort(t)},
	}
	t.Cleanup(func() {
		r, err := NewReplicated(opts)
		require.NoError(t, err)
		require.NoError(t, r.Stop(context.Background()))
		require.NoError(t, os.RemoveAll(opts.Dir))
	})

	r, err := EnsureReplicated(ctx, opts)
	require.NoError(t, err)
	require.Equal(t, r.Nodes[0].DataDir, r.Primary().DataDir)
	require.NoError(t, r.CreateDatabase(ctx, "drill"))
	dbURL := r.DatabaseURL("drill")
	execSQL(t, dbURL, "CREATE TABLE t (n int)")
	require.Equal(t, "sync", syncState(t, dbURL))

	for i := range 2 {
		execSQL(t, dbURL, "INSERT INTO t VALUES (1)")
		wasPrimary := r.Primary()
		require.NoError(t, wasPrimary.Crash())
		require.NoError(t, r.Promote(ctx))
		require.NotEqual(t, wasPrimary.DataDir, r.Primary().DataDir, "failover %d", i+1)
		require.Equal(t, int64(i+1), queryInt(t, dbURL, "SELECT count(*) FROM t"), "every acknowledged commit survives")
		require.NoError(t, r.Rebuild(ctx))
		require.Equal(t, "sync", syncState(t, dbURL))
	}
}

// TestPooler starts PgBouncer in transaction mode in front of a scratch
// cluster and reaches a database through it.
func TestPooler(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("initialises a cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Ensure(ctx, scratchOptions(t))
	require.NoError(t, err)
	p, err := EnsurePooler(ctx, PoolerOptions{Dir: c.DataDir + "-pgbouncer", Port: freePort(t), UpstreamPort: c.Port})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, p.Stop(context.Background()))
		require.NoError(t, os.RemoveAll(p.Dir))
	})
	require.NoError(t, c.CreateDatabase(ctx, "pooled"))
	require.Equal(t, int64(1), queryInt(t, p.DatabaseURL("pooled")+"&default_query_exec_mode=exec", "SELECT 1"))
	require.True(t, p.Running())
}

// syncState is the sync_state of the primary's standbys, one per line.
func syncState(t *testing.T, dbURL string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var states string
	require.NoError(t, conn.QueryRow(ctx, "SELECT coalesce(string_agg(sync_state, E'\\n'), '') FROM pg_stat_replication").Scan(&states))
	return states
}
