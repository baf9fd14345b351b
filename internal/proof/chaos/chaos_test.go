package chaos_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/proof/chaos"
)

// TestSoak runs a short soak, so that every run of the suite puts the
// whole system through kills, a Postgres restart and Stripe faults.
// `go run ./cmd/chaos` runs the long one.
func TestSoak(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs every process for half a minute")
	}

	t.Run("KeepsEveryPromiseUnderFaults", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		summary, err := chaos.Run(ctx, chaos.Config{
			Duration:     15 * time.Second,
			Clients:      8,
			Seed:         1,
			DrainTimeout: time.Minute,
			Progress:     t.Output(),
		})
		require.NoError(t, err)
		t.Logf("\n%s", summary)
		require.True(t, summary.OK(), "\n%s", summary)
		require.Positive(t, summary.APIKills)
		require.Positive(t, summary.PostgresRestarts)
		require.NotEmpty(t, summary.StripeFaults)
		require.Positive(t, summary.Report.Charges)
		require.Equal(t, summary.Report.KeysCreated, summary.Report.Charges, "one charge per ride")

		_, err = os.Stat(summary.Dir)
		require.ErrorIs(t, err, os.ErrNotExist, "the scratch cluster and its data are gone")
		leftovers, err := filepath.Glob(summary.Dir + "*")
		require.NoError(t, err)
		require.Empty(t, leftovers)
	})

	// The leader drill on Patroni: the leader dies as a machine does while
	// replication is held back and charges wait between Stripe and the
	// database; Patroni promotes the synchronous standby, and the killed
	// node rejoins as the synchronous standby. Nothing a client was told
	// may be lost, and no Stripe key may serve two requests. Relaxed, the
	// drill's default, so that the promoted leader writes on alone and
	// /readyz says so.
	t.Run("FailsOverWithoutLosingAcknowledgedKeys", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		port, err := localpg.HAScratchPort(2)
		require.NoError(t, err)
		summary, err := chaos.Run(ctx, chaos.Config{
			Duration:     15 * time.Second,
			Clients:      6,
			Seed:         2,
			DrainTimeout: time.Minute,
			Progress:     t.Output(),
			Failover:     true,
			Kills:        1,
			Replication:  localpg.HARelaxed,
			HAPort:       port,
		})
		require.NoError(t, err)
		t.Logf("\n%s", summary)
		require.True(t, summary.OK(), "\n%s", summary)
		require.Len(t, summary.Rounds, 1)
		require.NotEmpty(t, summary.Degraded, "the leader's death leaves no synchronous standby for a while")
		require.Empty(t, summary.ReadyzMissed(), "/readyz says that the primary alone confirms commits while no standby does")
		require.NotEmpty(t, summary.ReadyzAlone)
		require.NotEmpty(t, summary.ReadyzConfirmed, "/readyz says that a standby confirms commits while one does")
		require.Positive(t, summary.Acknowledged.Keys)
		require.Zero(t, summary.Acknowledged.Missing)
		require.Equal(t, summary.Report.KeysCreated, summary.Report.Charges, "one charge per ride")
	})

	// The soak with the network nemesis: every process reaches Postgres
	// and the Stripe fake through a fault proxy of its own, and each kind
	// of network fault (reset, blackhole, latency, a thin pipe, sliced
	// packets) hits some link beside the kills, the Postgres restart and
	// the Stripe faults.
	t.Run("KeepsEveryPromiseUnderNetworkFaults", func(t *testing.T) {
		t.Parallel()
		summary := runSoak(t, chaos.Config{Duration: 6 * time.Second, Clients: 6, Seed: 4, Network: true})
		for _, kind := range []string{chaos.NetReset, chaos.NetBlackhole, chaos.NetLatency, chaos.NetBandwidth, chaos.NetSlicer} {
			require.Positive(t, summary.NetworkFaults[kind], "%s injected", kind)
		}
		require.Positive(t, summary.Acknowledged.Keys)
		require.Zero(t, summary.Acknowledged.Missing)
		require.Empty(t, summary.Acknowledged.Lost)
		require.Equal(t, summary.Report.KeysCreated, summary.Report.Charges, "one charge per ride")
	})

	// The soak through PgBouncer in transaction mode, Postgres restarted
	// behind it.
	t.Run("KeepsEveryPromiseThroughPgBouncer", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		summary, err := chaos.Run(ctx, chaos.Config{
			Duration:     15 * time.Second,
			Clients:      6,
			Seed:         3,
			DrainTimeout: time.Minute,
			Progress:     t.Output(),
			Pooler:       true,
		})
		require.NoError(t, err)
		t.Logf("\n%s", summary)
		require.True(t, summary.OK(), "\n%s", summary)
		require.Positive(t, summary.PostgresRestarts)
		require.Equal(t, summary.Report.KeysCreated, summary.Report.Charges, "one charge per ride")
	})
}

// runSoak runs a soak of cfg, with a minute to drain and its progress in
// the test's output, and requires that it kept every promise.
func runSoak(t *testing.T, cfg chaos.Config) chaos.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg.DrainTimeout, cfg.Progress = time.Minute, t.Output()
	summary, err := chaos.Run(ctx, cfg)
	require.NoError(t, err)
	t.Logf("\n%s", summary)
	require.True(t, summary.OK(), "\n%s", summary)
	return summary
}

// TestRunRefusesConfig: a setting no soak can honour is refused by name
// before anything starts, not swapped for the default.
func TestRunRefusesConfig(t *testing.T) {
	t.Parallel()

	t.Run("RefusesNegativeSettings", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		_, err := chaos.Run(ctx, chaos.Config{Duration: -5 * time.Second})
		require.EqualError(t, err, "chaos: Duration -5s is negative")
		_, err = chaos.Run(ctx, chaos.Config{Clients: -3})
		require.EqualError(t, err, "chaos: Clients -3 is negative")
		_, err = chaos.Run(ctx, chaos.Config{DrainTimeout: -time.Minute})
		require.EqualError(t, err, "chaos: DrainTimeout -1m0s is negative")
		_, err = chaos.Run(ctx, chaos.Config{Failover: true, Kills: -1})
		require.EqualError(t, err, "chaos: Kills -1 is negative")
	})

	t.Run("RefusesContradictions", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		_, err := chaos.Run(ctx, chaos.Config{Replication: localpg.HAAsync})
		require.EqualError(t, err, "chaos: Replication needs the failover drill")
		_, err = chaos.Run(ctx, chaos.Config{Failover: true, Replication: "quorum"})
		require.EqualError(t, err, `chaos: Replication "quorum": want strict, relaxed or async`)
		_, err = chaos.Run(ctx, chaos.Config{Pooler: true, Failover: true})
		require.EqualError(t, err, "chaos: the pooler fronts one host; run it without the failover drill")
		_, err = chaos.Run(ctx, chaos.Config{Network: true, Failover: true})
		require.EqualError(t, err, "chaos: the network nemesis links each process to one database host; run it without the failover drill")
		_, err = chaos.Run(ctx, chaos.Config{Drill: chaos.DrillAgent})
		require.EqualError(t, err, "chaos: Drill and Kills need the failover drill")
		_, err = chaos.Run(ctx, chaos.Config{Failover: true, Drill: "switchover"})
		require.EqualError(t, err, `chaos: Drill "switchover": want leader, standby or agent`)
	})
}

// TestSummary: a soak kept for inspection says how to stop every cluster
// it left running: the one cluster, or the failover drill's Patroni
// cluster.
func TestSummary(t *testing.T) {
	t.Parallel()

	t.Run("SaysHowToStopEveryKeptCluster", func(t *testing.T) {
		t.Parallel()
		summary := chaos.Summary{Dir: "/soak", LogDir: "/soak/logs", DatabaseURL: "postgres://x/soak",
			KeptClusters: []localpg.Cluster{{DataDir: "/soak/postgres", BinDir: "/pg/bin"}}}
		text := summary.String()
		require.Contains(t, text, "stop postgres with: ")
		require.Contains(t, text, "/pg/bin/pg_ctl -D /soak/postgres stop\n")

		summary = chaos.Summary{Failover: true, Drill: chaos.DrillLeader, Dir: "/soak", LogDir: "/soak/logs",
			DatabaseURL: "postgres://x/soak", KeptHA: "/soak/ha"}
		require.Contains(t, summary.String(), "stop the Patroni cluster with: kill $(pgrep -f /soak/ha)\n")
	})
}
