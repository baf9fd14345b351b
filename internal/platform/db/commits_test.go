package db_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
// leader.
func synchronousStandby(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return scratchHA(ctx, t, "durability", 4).DatabaseURL("postgres")
}
