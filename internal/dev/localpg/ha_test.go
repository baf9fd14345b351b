package localpg

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
		require.Equal(t, HARelaxed, h.Mode, "a new cluster is relaxed unless asked otherwise")
		require.NoError(t, h.CreateDatabase(ctx, "drill"))
		dbURL := h.DatabaseURL("drill")
		execSQL(t, dbURL, "CREATE TABLE t (n int)")
		execSQL(t, dbURL, "INSERT INTO t VALUES (1)")

		// A cluster keeps its mode: asking a relaxed one for another mode
		// is refused, not silently ignored.
		_, err = EnsureHA(ctx, HAOptions{Dir: opts.Dir, Port: opts.Port, Mode: HAAsync})
		require.ErrorContains(t, err, "was created relaxed (synchronous_mode on, synchronous_mode_strict off), not async (synchronous_mode off)")
		_, err = EnsureHA(ctx, HAOptions{Dir: opts.Dir, Port: opts.Port, Mode: HAStrict})
		require.ErrorContains(t, err, "was created relaxed (synchronous_mode on, synchronous_mode_strict off), not strict")

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

	// Strict: the standby promoted while the old leader is down takes no
	// write until the old leader is back as its synchronous standby, and
	// then takes them again by itself.
	t.Run("StrictHoldsWritesUntilTheClusterIsWhole", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		opts := scratchHA(t, 4)
		opts.Mode = HAStrict
		h, err := EnsureHA(ctx, opts)
		require.NoError(t, err)
		require.Equal(t, HAStrict, h.Mode)
		require.NoError(t, h.CreateDatabase(ctx, "drill"))
		dbURL := h.DatabaseURL("drill")
		execSQL(t, dbURL, "CREATE TABLE t (n int)")
		execSQL(t, dbURL, "INSERT INTO t VALUES (1)")

		_, err = EnsureHA(ctx, HAOptions{Dir: opts.Dir, Port: opts.Port, Mode: HARelaxed})
		require.ErrorContains(t, err, "was created strict (synchronous_mode and synchronous_mode_strict on), not relaxed")
		again, err := EnsureHA(ctx, HAOptions{Dir: opts.Dir, Port: opts.Port})
		require.NoError(t, err, "no mode asked: the cluster's own")
		require.Equal(t, HAStrict, again.Mode)

		leader, err := h.Leader(ctx)
		require.NoError(t, err)
		require.NoError(t, leader.Kill())
		promoted, err := h.AwaitLeader(ctx)
		require.NoError(t, err, "Patroni promotes the synchronous standby")
		require.Equal(t, h.Other(leader), promoted)
		conn, err := pgx.Connect(ctx, dbURL)
		require.NoError(t, err)
		defer conn.Close(context.WithoutCancel(ctx))
		held, cancelHeld := context.WithTimeout(ctx, 2*time.Second)
		_, err = conn.Exec(held, "INSERT INTO t VALUES (2)")
		cancelHeld()
		require.ErrorIs(t, err, context.DeadlineExceeded, "the promoted leader holds the commit: no standby has it")

		require.NoError(t, leader.Start(ctx))
		require.NoError(t, leader.Await(ctx, "/sync"), "the killed node rejoins as the synchronous standby")
		execSQL(t, dbURL, "INSERT INTO t VALUES (3)")
		// The held commit was cancelled, not rolled back: Postgres keeps
		// what it committed locally and says so only in a warning, which
		// is why nothing of the product's may cancel a commit that waits
		// for a standby. The rejoined node is a standby: the leader's
		// commit waited for it to flush the row, not to replay it, so the
		// count is awaited there.
		standby := leader.Postgres().DatabaseURL("drill")
		require.Eventually(t, func() bool {
			conn, err := pgx.Connect(ctx, standby)
			if err != nil {
				return false
			}
			defer conn.Close(context.WithoutCancel(ctx))
			var n int64
			return conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n) == nil && n == 3
		}, time.Minute, 100*time.Millisecond, "the rejoined standby replays every row, the held commit's included")
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
