package localpg

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

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
