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

	// The failover drill, synchronous: the primary is SIGKILLed while
	// replication is held back and charges wait between Stripe and the
	// database; the standby is promoted and a new one built. Nothing a
	// client was told may be lost, and no Stripe key may serve two
	// requests.
	t.Run("FailsOverWithoutLosingAcknowledgedKeys", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		summary, err := chaos.Run(ctx, chaos.Config{
			Duration:     15 * time.Second,
			Clients:      6,
			Seed:         2,
			DrainTimeout: time.Minute,
			Progress:     t.Output(),
			Failover:     true,
		})
		require.NoError(t, err)
		t.Logf("\n%s", summary)
		require.True(t, summary.OK(), "\n%s", summary)
		require.NotEmpty(t, summary.Failovers)
		require.Positive(t, summary.Acknowledged.Keys)
		require.Zero(t, summary.Acknowledged.Missing)
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
	})

	t.Run("RefusesContradictions", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		_, err := chaos.Run(ctx, chaos.Config{AsyncReplication: true})
		require.EqualError(t, err, "chaos: asynchronous replication needs the failover drill")
		_, err = chaos.Run(ctx, chaos.Config{Pooler: true, Failover: true})
		require.EqualError(t, err, "chaos: the pooler fronts one host; run it without the failover drill")
	})
}

// TestSummary: a soak kept for inspection says how to stop every cluster
// it left running, both nodes of the failover drill's pair.
func TestSummary(t *testing.T) {
	t.Parallel()

	t.Run("SaysHowToStopEveryKeptCluster", func(t *testing.T) {
		t.Parallel()
		summary := chaos.Summary{Failover: true, Dir: "/soak", LogDir: "/soak/logs", DatabaseURL: "postgres://x/soak",
			KeptClusters: []localpg.Cluster{
				{DataDir: "/soak/replicated/node-b", BinDir: "/pg/bin"},
				{DataDir: "/soak/replicated/node-a", BinDir: "/pg/bin"},
			}}
		text := summary.String()
		require.Contains(t, text, "stop node-b with: ")
		require.Contains(t, text, "/pg/bin/pg_ctl -D /soak/replicated/node-b stop\n")
		require.Contains(t, text, "stop node-a with: ")
		require.Contains(t, text, "/pg/bin/pg_ctl -D /soak/replicated/node-a stop\n")
	})
}
