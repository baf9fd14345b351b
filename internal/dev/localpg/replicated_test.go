package localpg

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/project"
)

// TestReplicated runs replicated pairs of its own, each in a scratch
// directory on ports of its own.
func TestReplicated(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("initialises two clusters per pair")
	}

	// A synchronous pair fails over twice: what the primary committed is
	// on the standby it promotes, and the multi-host URL follows the
	// primary without being changed.
	t.Run("FailsOverWithoutLosingCommits", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		opts := scratchReplicated(t)
		r, err := EnsureReplicated(ctx, opts)
		require.NoError(t, err)
		require.Equal(t, r.Nodes[0].DataDir, r.Primary().DataDir)
		require.NoError(t, r.CreateDatabase(ctx, "drill"))
		dbURL := r.DatabaseURL("drill")
		execSQL(t, dbURL, "CREATE TABLE t (n int)")
		require.Equal(t, "sync", syncState(t, dbURL))

		// A pair keeps its mode: asking a synchronous one for an
		// asynchronous standby is refused, not silently ignored.
		_, err = NewReplicated(ReplicatedOptions{Dir: opts.Dir, Ports: opts.Ports, Async: true})
		require.ErrorContains(t, err, "created with sync replication, not async: to change its mode, stop it and remove "+opts.Dir)

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
	})

	// An asynchronous pair stays asynchronous for the commands that do
	// not say (localpg replica url, rebuild): a rebuild configures the
	// new standby as the pair was created, and does not wait for it to
	// become synchronous.
	t.Run("KeepsTheModeItWasCreatedWith", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		opts := scratchReplicated(t)
		opts.Async = true
		r, err := EnsureReplicated(ctx, opts)
		require.NoError(t, err)
		require.Equal(t, "async", syncState(t, r.DatabaseURL("postgres")))

		later, err := NewReplicated(ReplicatedOptions{Dir: opts.Dir, Ports: opts.Ports})
		require.NoError(t, err)
		require.True(t, later.Async, "the mode read back from the pair")
		require.NoError(t, later.Start(ctx))
		require.NoError(t, later.Rebuild(ctx))
		require.Equal(t, "async", syncState(t, r.DatabaseURL("postgres")))
	})
}

func TestNewReplicated(t *testing.T) {
	t.Parallel()

	t.Run("RefusesHalfSetPorts", func(t *testing.T) {
		t.Parallel()
		for _, ports := range [][2]int{{freePort(t), 0}, {0, freePort(t)}} {
			_, err := NewReplicated(ReplicatedOptions{Dir: t.TempDir(), Ports: ports})
			require.ErrorContains(t, err, "set both ports or neither")
		}
	})

	// A start that failed before it created a node (its port taken, say)
	// has recorded a mode for a pair that does not exist: the next start
	// takes the mode it asks for.
	t.Run("ForgetsTheModeOfAPairNeverCreated", func(t *testing.T) {
		t.Parallel()
		for saved, async := range map[string]bool{"async": false, "sync": true} {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, modeFile), []byte(saved+"\n"), 0o644))
			r, err := NewReplicated(ReplicatedOptions{Dir: dir, Ports: [2]int{freePort(t), freePort(t)}, Async: async})
			require.NoError(t, err, "recorded %s, asked async=%t", saved, async)
			require.Equal(t, async, r.Async, "recorded %s", saved)
		}
	})
}

// TestStalePidFile gives the pid of a killed server to another process,
// as the kernel may once the server is gone: crashing or stopping by the
// stale pid file must leave that process alone.
func TestStalePidFile(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		stranger *os.Process // neither postgres nor pgbouncer
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		cmd := exec.Command("sleep", "60")
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		return &testBundle{stranger: cmd.Process}
	}
	// staleCluster is a cluster whose pid file names the stranger.
	staleCluster := func(t *testing.T, b *testBundle) Cluster {
		t.Helper()
		c, err := New(Options{DataDir: t.TempDir(), Port: freePort(t)})
		require.NoError(t, err)
		pidFile := fmt.Sprintf("%d\n%s\n", b.stranger.Pid, c.DataDir)
		require.NoError(t, os.WriteFile(filepath.Join(c.DataDir, "postmaster.pid"), []byte(pidFile), 0o600))
		return c
	}

	t.Run("CrashLeavesAStrangerAlone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, staleCluster(t, b).Crash())
		require.NoError(t, b.stranger.Signal(syscall.Signal(0)), "the stranger still runs")
	})

	t.Run("StopLeavesAStrangerAlone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := staleCluster(t, b)
		running, err := c.Running(context.Background())
		require.NoError(t, err)
		require.False(t, running, "a stale pid file is no running server")
		require.NoError(t, c.Stop(context.Background()))
		require.NoError(t, b.stranger.Signal(syscall.Signal(0)), "the stranger still runs")
	})

	t.Run("PoolerStopLeavesAStrangerAlone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pooler, err := NewPooler(PoolerOptions{Dir: t.TempDir(), Port: freePort(t), UpstreamPort: freePort(t)})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(pooler.pidFile, []byte(strconv.Itoa(b.stranger.Pid)+"\n"), 0o644))
		require.NoError(t, pooler.Stop(context.Background()))
		require.NoError(t, b.stranger.Signal(syscall.Signal(0)), "the stranger still runs")
	})
}

// scratchReplicated describes a throwaway synchronous pair under the
// project's .data/, stopped and removed when the test ends.
func scratchReplicated(t *testing.T) ReplicatedOptions {
	t.Helper()
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
	return opts
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
	p, err := NewPooler(PoolerOptions{Dir: c.DataDir + "-pgbouncer", Port: freePort(t), UpstreamPort: c.Port})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, p.Stop(context.Background()))
		require.NoError(t, os.RemoveAll(p.Dir))
	})
	require.NoError(t, p.Start(ctx))
	require.NoError(t, c.CreateDatabase(ctx, "pooled"))
	require.Equal(t, int64(1), queryInt(t, p.DatabaseURL("pooled")+"&default_query_exec_mode=exec", "SELECT 1"))
	require.NotZero(t, p.pid(), "pgbouncer runs")
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
