package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/testkit/invariant"
)

// TestOK holds every drill, DrillAgent too, to the invariant check made
// once the reconciler has run: a ride the failover lost passes only when
// the reconciler put it back, and nothing else excuses a violation.
func TestOK(t *testing.T) {
	t.Parallel()
	lost := LostRide{Key: "k1", ChargeID: "ch_1"}
	// agent is an agent drill that ran, lost a ride and had it restored,
	// then is changed by change.
	agent := func(change func(s *Summary)) Summary {
		s := Summary{
			Failover: true, Drill: DrillAgent, Replication: localpg.HAStrict, Judged: true,
			Rounds:          []round{{node: "node-a"}},
			ReadyzConfirmed: []time.Time{time.Now()},
			Reconciler:      "charges=2 rides=2",
			ReportBefore: invariant.Report{Keys: 2, Violations: []invariant.Violation{
				{Kind: invariant.ChargeWithoutRide, Detail: "charge ch_1 names no ride", ChargeID: "ch_1"},
			}},
			Report:             invariant.Report{Keys: 2},
			AcknowledgedBefore: Acknowledged{Keys: 2, Missing: 1, Lost: []LostRide{lost}},
			Acknowledged:       Acknowledged{Keys: 2, Restored: []LostRide{lost}},
		}
		if change != nil {
			change(&s)
		}
		return s
	}
	require.True(t, agent(nil).OK(), "a lost ride the reconciler restored")

	for name, change := range map[string]func(s *Summary){
		"ChargeWithoutRideLeft": func(s *Summary) {
			s.Report.Violations = s.ReportBefore.Violations
		},
		"RideStillLost": func(s *Summary) {
			s.Acknowledged.Lost, s.Acknowledged.Restored = []LostRide{lost}, nil
		},
		"KeyStillMissing": func(s *Summary) { s.Acknowledged.Missing = 1 },
		"ReceiptRecordLostThoughMailed": func(s *Summary) {
			s.Report.Violations = []invariant.Violation{{Kind: invariant.ReceiptMissing, Detail: "paid ride 332 has no receipt", RideID: 332}}
			s.ReceiptsMailed = map[int64]bool{332: true}
		},
		"StripeKeyReused":  func(s *Summary) { s.Acknowledged.StripeKeyMismatches = 1 },
		"OddAnswer":        func(s *Summary) { s.OddAnswers = []string{"key k2 answered 502"} },
		"ReconcilerFailed": func(s *Summary) { s.ReconcilerFailed = true },
		"NotJudged":        func(s *Summary) { s.Judged = false },
		"NoRound":          func(s *Summary) { s.Rounds = nil },
	} {
		require.False(t, agent(change).OK(), name)
	}
}

// TestRestored: a ride lost before the reconciler ran is restored when it
// is not lost after it.
func TestRestored(t *testing.T) {
	t.Parallel()
	a, b, c := LostRide{"k1", "ch_1"}, LostRide{"k2", "ch_2"}, LostRide{"k3", "ch_3"}
	require.Equal(t, []LostRide{a, c}, restored([]LostRide{a, b, c}, []LostRide{b}))
	require.Empty(t, restored([]LostRide{a}, []LostRide{a}))
	require.Empty(t, restored(nil, []LostRide{a}))
}

// TestLongestGap: writes are blocked for the longest time without a 201
// across the round, from the last one before the fault to the first
// after the rejoin, and still blocked when none came after it.
func TestLongestGap(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	at := func(seconds float64) time.Time { return t0.Add(time.Duration(seconds * float64(time.Second))) }
	writes := []time.Time{at(-2), at(-0.5), at(1), at(1.5), at(9.5), at(10), at(30)}
	require.Equal(t, window{at(1.5), at(9.5)}, longestGap(writes, t0, at(9.7)))
	require.Equal(t, window{at(10), at(30)}, longestGap(writes, t0, at(20)), "the gap that the first write after the rejoin ends")
	require.Equal(t, window{at(-0.5), at(1)}, longestGap(writes, t0, at(0.5)), "the gap across the fault")
	require.Equal(t, window{start: at(30)}, longestGap(writes, t0, at(40)), "no write after the rejoin: still blocked")
	require.Equal(t, window{t0, at(1)}, longestGap([]time.Time{at(1), at(2)}, t0, at(1.5)), "no write before the fault")
}

// TestReadyzMissed holds /readyz to what it said in each window without a
// synchronous standby, not to how soon it answered: relaxed, that the
// primary alone confirmed commits; strict, that commits waited.
func TestReadyzMissed(t *testing.T) {
	t.Parallel()
	start := time.Now()
	w := window{start, start.Add(10 * time.Second)}
	inside := start.Add(3 * time.Second)
	short := window{start.Add(time.Minute), start.Add(time.Minute + time.Second)}
	for _, tc := range []struct {
		name                      string
		mode                      localpg.HAMode
		alone, confirmed, waiting []time.Time
		missed                    int
	}{
		{"SaidAlone", localpg.HARelaxed, []time.Time{inside}, []time.Time{inside}, nil, 0},
		{"SaidOnlyConfirmed", localpg.HARelaxed, nil, []time.Time{inside}, nil, 1},
		{"NeverAnswered", localpg.HARelaxed, nil, nil, nil, 0},
		{"SaidAloneJustAfter", localpg.HARelaxed, []time.Time{w.end.Add(time.Second)}, []time.Time{inside}, nil, 0},
		{"RelaxedSaidOnlyWaiting", localpg.HARelaxed, nil, []time.Time{inside}, []time.Time{inside}, 1},
		{"StrictSaidWaiting", localpg.HAStrict, nil, []time.Time{w.end.Add(time.Second)}, []time.Time{inside}, 0},
		{"StrictSaidOnlyAlone", localpg.HAStrict, []time.Time{inside}, []time.Time{inside}, nil, 1},
	} {
		s := Summary{Failover: true, Replication: tc.mode, Degraded: []window{w, short},
			ReadyzAlone: tc.alone, ReadyzConfirmed: tc.confirmed, ReadyzWaiting: tc.waiting}
		require.Len(t, s.ReadyzMissed(), tc.missed, tc.name)
	}
}

// TestNetworkSummary: a soak with the network nemesis passes only if the
// nemesis injected something, and its summary counts every kind, those
// never injected too, and every link hit.
func TestNetworkSummary(t *testing.T) {
	t.Parallel()
	s := Summary{Network: true, Judged: true, PostgresRestarts: 1, Report: invariant.Report{Keys: 1},
		NetworkFaults:     map[string]int{NetReset: 2, NetBlackhole: 1},
		NetworkFaultLinks: map[string]int{"api-1->postgres": 2, "worker->postgres": 1}}
	require.True(t, s.OK())
	text := s.String()
	require.Contains(t, text, "network faults injected    reset_peer 2, timeout 1, latency 0, bandwidth 0, slicer 0\n")
	require.Contains(t, text, "by link                  api-1->postgres: 2, worker->postgres: 1\n")

	s.NetworkFaults, s.NetworkFaultLinks = nil, nil
	require.False(t, s.OK(), "a network soak without a network fault")
	require.Contains(t, s.String(), "problem: the network nemesis injected nothing\n")
}
