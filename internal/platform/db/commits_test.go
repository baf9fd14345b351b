package db_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
)

func TestCheckDurability(t *testing.T) {
	t.Parallel()

	check := func(t *testing.T, url string) db.Durability {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pool, err := db.Open(ctx, url, 2)
		require.NoError(t, err)
		defer pool.Close()
		d, err := db.CheckDurability(ctx, pool, 0)
		require.NoError(t, err)
		return d
	}

	// The project's development cluster has no standby: its commits are
	// the primary's alone, which is said plainly.
	t.Run("PrimaryAloneWithoutStandby", func(t *testing.T) {
		t.Parallel()
		if _, ok := os.LookupEnv("TEST_DATABASE_URL"); ok {
			t.Skip("TEST_DATABASE_URL may have standbys")
		}
		d := check(t, dbtest.NewURL(t))
		require.False(t, d.StandbyConfirms)
		require.Zero(t, d.Streaming)
		require.Empty(t, d.SynchronousStandbyNames)
		require.Equal(t, "confirmed by the primary alone (no standby)", d.String())
	})

	t.Run("StandbyConfirms", func(t *testing.T) {
		t.Parallel()
		if testing.Short() {
			t.Skip("starts a primary with a synchronous standby")
		}
		url := synchronousStandby(t)
		// A standby that has just connected is asynchronous for a moment.
		var d db.Durability
		require.Eventually(t, func() bool {
			d = check(t, url)
			return len(d.Synchronous) > 0
		}, time.Minute, 100*time.Millisecond, "a standby shows as synchronous")
		require.True(t, d.StandbyConfirms)
		require.Equal(t, 1, d.Streaming)
		require.Contains(t, d.String(), "confirmed by the primary and a synchronous standby (")
	})
}

// synchronousStandby starts a Patroni cluster of the test's own, a leader
// with a streaming synchronous standby, and returns a URL that reaches the
// leader. It is the one place these tests depend on how such a cluster is
// run.
func synchronousStandby(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := localpg.New(localpg.Options{})
	require.NoError(t, err)
	dir, err := os.MkdirTemp(filepath.Dir(c.DataDir), "scratch-durability-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	port, err := localpg.HAScratchPort(4)
	require.NoError(t, err)
	opts := localpg.HAOptions{Dir: dir, Port: port}
	t.Cleanup(func() {
		h, err := localpg.NewHA(opts)
		require.NoError(t, err)
		require.NoError(t, h.Stop(context.Background()))
		require.NoError(t, os.RemoveAll(dir))
	})
	h, err := localpg.EnsureHA(ctx, opts)
	require.NoError(t, err)
	return h.DatabaseURL("postgres")
}
