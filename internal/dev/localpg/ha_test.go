package localpg

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHA runs a Patroni cluster of its own, in a scratch directory on the
// first block of scratch ports.
func TestHA(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs etcd and two Patroni nodes")
	}

	// The leader dies as a machine does; Patroni alone promotes the
	// synchronous standby, which has every acknowledged commit, and the
	// multi-host URL follows the new leader without being changed. The
	// killed node, started again, rewinds and rejoins as the synchronous
	// standby.
	t.Run("FailsOverAndRejoinsWithoutLosingCommits", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		opts := scratchHA(t, 0)
		h, err := EnsureHA(ctx, opts)
		require.NoError(t, err)
		require.False(t, h.Async)
		require.NoError(t, h.CreateDatabase(ctx, "drill"))
		dbURL := h.DatabaseURL("drill")
		execSQL(t, dbURL, "CREATE TABLE t (n int)")
		execSQL(t, dbURL, "INSERT INTO t VALUES (1)")

		// A cluster keeps its mode: asking a synchronous one for an
		// asynchronous one is refused, not silently ignored.
		_, err = EnsureHA(ctx, HAOptions{Dir: opts.Dir, Port: opts.Port, Async: true})
		require.ErrorContains(t, err, "was created in synchronous mode, not asynchronous")

		leader, err := h.Leader(ctx)
		require.NoError(t, err)
		require.NoError(t, leader.Kill())
		promoted, err := h.AwaitLeader(ctx)
		require.NoError(t, err, "Patroni promotes the synchronous standby")
		require.Equal(t, h.Other(leader), promoted)
		require.Equal(t, int64(1), queryInt(t, dbURL, "SELECT count(*) FROM t"), "every acknowledged commit survives")
		execSQL(t, dbURL, "INSERT INTO t VALUES (2)")

		require.NoError(t, leader.Start(ctx))
		require.NoError(t, leader.Await(ctx, "/sync"), "the killed node rejoins as the synchronous standby")
		require.Equal(t, int64(2), queryInt(t, leader.Postgres().DatabaseURL("drill"), "SELECT count(*) FROM t"), "it replays what the new leader committed")
	})
}

// scratchHA describes a throwaway cluster (ScratchDir) on scratch port
// block n, stopped and removed when the test ends.
func scratchHA(t *testing.T, n int) HAOptions {
	t.Helper()
	dir, err := ScratchDir("ha")
	require.NoError(t, err)
	port, err := HAScratchPort(n)
	require.NoError(t, err)
	opts := HAOptions{Dir: dir, Port: port}
	t.Cleanup(func() {
		h, err := NewHA(opts)
		require.NoError(t, err)
		require.NoError(t, h.Remove(context.Background()))
	})
	return opts
}
