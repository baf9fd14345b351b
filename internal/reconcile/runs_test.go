package reconcile

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

func TestRecord(t *testing.T) {
	t.Parallel()

	t.Run("LatestIsTheLastRecordedRun", func(t *testing.T) {
		t.Parallel()
		b := apitest.New(t, apitest.Options{})
		r, err := New(&Config{Pool: b.Pool, Payments: b.Gateway})
		require.NoError(t, err)
		ctx := context.Background()

		latest, err := Latest(ctx, b.Pool)
		require.NoError(t, err)
		require.Nil(t, latest, "nothing recorded yet")

		now := time.Now().UTC().Truncate(time.Second)
		for i := range keptRuns + 2 {
			require.NoError(t, r.Record(ctx, &Report{Since: now.Add(-time.Hour), Until: now, Charges: i}))
		}
		want := &Report{Since: now.Add(-time.Hour), Until: now, Charges: 7, Rides: 8, Pending: 1, Discrepancies: []Discrepancy{
			{Kind: DoubleCharge, ChargeID: "ch_2", RideID: 3, Detail: "second charge"},
			{Kind: UnknownCharge, RideID: 4, Detail: "no such charge"},
		}}
		require.NoError(t, r.Record(ctx, want))

		latest, err = Latest(ctx, b.Pool)
		require.NoError(t, err)
		require.Equal(t, want.Discrepancies, latest.Discrepancies)
		require.Equal(t, 7, latest.Charges)
		require.True(t, want.Until.Equal(latest.Until))
		var n int
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM reconcile_runs`).Scan(&n))
		require.Equal(t, keptRuns, n, "older runs are forgotten")
	})
}
