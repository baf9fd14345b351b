package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/testkit/invariant"
)

// TestLossesReported holds the agent drill's pass rule: every loss is
// one the reconciler reported, or a receipt mailed whose record the old
// leader's timeline took with it.
func TestLossesReported(t *testing.T) {
	t.Parallel()
	agent := func(violations ...invariant.Violation) Summary {
		return Summary{
			Reconciler:         "charges=2 rides=1 charge_without_ride=1",
			ReconcilerLines:    []string{"charges=2 rides=1 charge_without_ride=1", "charge_without_ride charge=ch_1: metadata ride_id 7 names no ride"},
			ChargesWithoutRide: map[string]bool{"ch_1": true},
			ReceiptsMailed:     map[int64]bool{332: true, 378: false},
			Report:             invariant.Report{Violations: violations},
		}
	}
	reported := invariant.Violation{Kind: invariant.ChargeWithoutRide, Detail: "charge ch_1 (customer cus_1) names no ride", ChargeID: "ch_1"}
	unreported := invariant.Violation{Kind: invariant.ChargeWithoutRide, Detail: "charge ch_2 (customer cus_1) names no ride", ChargeID: "ch_2"}
	mailed := invariant.Violation{Kind: invariant.ReceiptMissing, Detail: "paid ride 332 has no receipt although the worker drained its queue", RideID: 332}
	unmailed := invariant.Violation{Kind: invariant.ReceiptMissing, Detail: "paid ride 378 has no receipt although the worker drained its queue", RideID: 378}
	double := invariant.Violation{Kind: invariant.DoubleCharge, Detail: "ride 9 charged twice"}

	require.True(t, agent().lossesReported())
	require.True(t, agent(reported).lossesReported())
	require.True(t, agent(reported, mailed).lossesReported(), "a receipt mailed whose record was lost")
	require.False(t, agent(unreported).lossesReported(), "a charge the reconciler did not report")
	require.False(t, agent(reported, unmailed).lossesReported(), "a receipt never mailed")
	require.False(t, agent(double).lossesReported())
}

// TestReadyzMissed holds /readyz to what it said in each window without a
// synchronous standby, not to how soon it answered.
func TestReadyzMissed(t *testing.T) {
	t.Parallel()
	start := time.Now()
	w := window{start, start.Add(10 * time.Second)}
	inside := start.Add(3 * time.Second)
	short := window{start.Add(time.Minute), start.Add(time.Minute + time.Second)}
	for _, tc := range []struct {
		name             string
		alone, confirmed []time.Time
		missed           int
	}{
		{"SaidAlone", []time.Time{inside}, []time.Time{inside}, 0},
		{"SaidOnlyConfirmed", nil, []time.Time{inside}, 1},
		{"NeverAnswered", nil, nil, 0},
		{"SaidAloneJustAfter", []time.Time{w.end.Add(time.Second)}, []time.Time{inside}, 0},
	} {
		s := Summary{Failover: true, Degraded: []window{w, short}, ReadyzAlone: tc.alone, ReadyzConfirmed: tc.confirmed}
		require.Len(t, s.ReadyzMissed(), tc.missed, tc.name)
	}
}
