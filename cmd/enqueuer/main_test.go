package main

import (
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/jobs"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/testkit/proctest"
)

// t.Setenv rules out t.Parallel in this file.

func TestBuild(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)

	setEnv := func(t *testing.T, databaseURL string, env ...string) {
		t.Helper()
		t.Setenv("DATABASE_URL", databaseURL)
		proctest.Setenv(t, env...)
	}

	t.Run("RefusesZeroNamingEachSetting", func(t *testing.T) {
		setEnv(t, "postgres://127.0.0.1:1/none",
			"ENQUEUER_POLL_INTERVAL", "0s",
			"ENQUEUER_BATCH_SIZE", "0")
		proctest.RequireRefused(t, build,
			"ENQUEUER_POLL_INTERVAL=0s: must be positive",
			"ENQUEUER_BATCH_SIZE=0: must be positive")
	})

	t.Run("RefusesNegatives", func(t *testing.T) {
		setEnv(t, "postgres://127.0.0.1:1/none",
			"ENQUEUER_POLL_INTERVAL", "-1s",
			"ENQUEUER_BATCH_SIZE", "-1")
		proctest.RequireRefused(t, build, "ENQUEUER_POLL_INTERVAL=-1s: must be positive", "ENQUEUER_BATCH_SIZE=-1: must be positive")
	})

	t.Run("RequiresTheDatabase", func(t *testing.T) {
		setEnv(t, "")
		proctest.RequireRefused(t, build, "DATABASE_URL must be set")
	})

	t.Run("BuildsAndMovesABatch", func(t *testing.T) {
		url := dbtest.NewURL(t)
		setEnv(t, url, "ENQUEUER_BATCH_SIZE", "1")
		stage(t, url,
			jobs.ReceiptArgs{RideID: 1, UserID: 1, Amount: 20_00, Currency: "usd", StripeChargeID: "ch_1"},
			jobs.ReceiptArgs{RideID: 2, UserID: 1, Amount: 20_00, Currency: "usd", StripeChargeID: "ch_2"})

		env := &config.Env{}
		program, err := build(t.Context(), env, logger)
		require.NoError(t, err)
		defer program.Close()
		summary, err := program.Once(t.Context())
		require.NoError(t, err)
		require.Equal(t, "enqueued=1", summary, "one batch of ENQUEUER_BATCH_SIZE")
		require.Equal(t, 1.0, counter(t, program.Metrics, "rocketrides_enqueuer_jobs_enqueued_total"))
		// What the start line says.
		require.Contains(t, env.Attrs(), slog.String("enqueuer_batch_size", "1"))
		require.Contains(t, env.Attrs(), slog.String("enqueuer_poll_interval", config.FormatDuration(jobs.DefaultPollInterval)))
	})
}

// stage commits args as staged jobs in the database at databaseURL, as an
// atomic phase would. The rides need not exist for the enqueuer.
func stage(t *testing.T, databaseURL string, args ...river.JobArgs) {
	t.Helper()
	pool, err := db.Open(t.Context(), databaseURL, 0)
	require.NoError(t, err)
	defer pool.Close()
	err = pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		var b pgx.Batch
		for _, a := range args {
			if err := jobs.Stage(&b, a); err != nil {
				return err
			}
		}
		return tx.SendBatch(t.Context(), &b).Close()
	})
	require.NoError(t, err)
}

// counter returns the value of the counter called name in g.
func counter(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	families, err := g.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			require.Len(t, f.GetMetric(), 1, name)
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// -help lists every setting enqueuer reads, a mistyped one stops it, and its
// start line keeps secrets out.
func TestSettings(t *testing.T) {
	proctest.TestSettings(t, command, "DATABASE_URL", "postgres://127.0.0.1:1/none")
}
