package chaos

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/testkit/invariant"
)

// Summary is what a soak did and found.
type Summary struct {
	Duration time.Duration
	Clients  int
	Seed     int64
	// Failover, AsyncReplication and Pooler are the Config's.
	Failover, AsyncReplication, Pooler bool

	// Requests counts every POST /rides sent, retries included; Answers
	// counts them by status ("201", "201 replayed", "409", "503", ...,
	// "network error").
	Requests int
	Answers  map[string]int
	// Keys counts the idempotency keys the clients used; KeyOutcomes the
	// final answer of each key whose client saw one, KeysGivenUp those
	// whose client ran out of attempts and left the key to the
	// completers.
	Keys        int
	KeyOutcomes map[string]int
	KeysGivenUp int
	// OddAnswers are final answers no correct server gives these
	// requests (a 422, a 502...).
	OddAnswers []string

	APIKills         int
	CompleterKills   int
	PostgresRestarts int
	// Failovers are the drill's failovers, as timed (Config.Failover).
	Failovers []failover
	// Acknowledged is what became of the keys whose clients got their
	// final answer.
	Acknowledged Acknowledged
	// StripeFaults counts the injections by kind (FaultFailNext, ...),
	// StripeFaultRequests the charge requests they targeted.
	StripeFaults        map[string]int
	StripeFaultRequests map[string]int

	// Reconciler is the first line of cmd/reconciler -once, when it
	// exists; ReconcilerFailed that it found discrepancies or could not
	// run.
	Reconciler       string
	ReconcilerFailed bool

	// Report is the invariant check after the drain; Judged that the
	// soak got that far.
	Report invariant.Report
	Judged bool

	// Problems are failures of the soak itself: a process that did not
	// come back, a drain that timed out. Any makes the soak fail.
	Problems []string

	// Dir holds the scratch cluster, the processes' logs and the mail.
	Dir, LogDir, DatabaseURL string
	// KeptClusters are the scratch clusters left running by Config.Keep:
	// the one cluster, or with Config.Failover both nodes of the pair.
	KeptClusters []localpg.Cluster
}

// Acknowledged compares what the clients were told with what is left.
type Acknowledged struct {
	// Keys whose client got a 201 or 402.
	Keys int
	// Missing are those the database no longer has: a failover lost
	// them after the client was told.
	Missing int
	// ChargesSharedByKeys counts charges a 201 named for two or more
	// keys: one Stripe idempotency key used for two requests, Stripe
	// replaying the first one's charge to the second.
	ChargesSharedByKeys int
	// StripeKeyMismatches counts charges Stripe refused because their
	// idempotency key had been used with other parameters: the same
	// reuse, with a different ride or customer.
	StripeKeyMismatches int
	// Examples of each, for the summary.
	Examples []string
}

// OK reports whether every promise held.
func (a Acknowledged) OK() bool {
	return a.Missing == 0 && a.ChargesSharedByKeys == 0 && a.StripeKeyMismatches == 0
}

// OK reports whether the soak ran as intended and every promise held.
func (s Summary) OK() bool {
	return s.Judged && s.Report.OK() && s.Acknowledged.OK() && !s.ReconcilerFailed && len(s.Problems) == 0 &&
		len(s.OddAnswers) == 0 && s.databaseFaulted() && s.Report.Keys > 0
}

// databaseFaulted reports whether the database went away at least once:
// a restart, or with the drill a failover.
func (s Summary) databaseFaulted() bool {
	if s.Failover {
		return len(s.Failovers) > 0
	}
	return s.PostgresRestarts > 0
}

// mode names what the soak ran against, beyond one Postgres.
func (s Summary) mode() string {
	switch {
	case s.Failover && s.AsyncReplication:
		return ", failover drill, asynchronous replication"
	case s.Failover:
		return ", failover drill, synchronous replication"
	case s.Pooler:
		return ", through PgBouncer (transaction mode)"
	}
	return ""
}

// String is the summary as cmd/chaos prints it.
func (s Summary) String() string {
	var b strings.Builder
	line := func(name, format string, args ...any) {
		fmt.Fprintf(&b, "  %-26s %s\n", name, fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(&b, "chaos soak: %s, %d clients, seed %d%s\n", s.Duration, s.Clients, s.Seed, s.mode())
	line("requests sent", "%d (%s)", s.Requests, counts(s.Answers))
	line("keys", "%d (final answers: %s; given up by clients: %d)", s.Keys, counts(s.KeyOutcomes), s.KeysGivenUp)
	line("api kills (SIGKILL)", "%d", s.APIKills)
	line("completer kills (SIGKILL)", "%d", s.CompleterKills)
	if s.Failover {
		line("failovers", "%d", len(s.Failovers))
		for i, f := range s.Failovers {
			line(fmt.Sprintf("  failover %d", i+1), "replication stalled %s; primary killed -> promoted %s, -> first 201 %s; new standby in %s",
				f.stalled.Round(time.Millisecond), f.promoted.Round(time.Millisecond), f.firstOK.Round(time.Millisecond), f.rebuilt.Round(time.Millisecond))
		}
	} else {
		line("postgres restarts", "%d", s.PostgresRestarts)
	}
	var faults []string
	for _, kind := range []string{FaultFailNext, FaultDropAfterCommit, FaultLatency} {
		if kind == FaultLatency {
			faults = append(faults, fmt.Sprintf("%s %d", kind, s.StripeFaults[kind]))
			continue
		}
		faults = append(faults, fmt.Sprintf("%s %d (%d requests)", kind, s.StripeFaults[kind], s.StripeFaultRequests[kind]))
	}
	line("stripe faults injected", "%s", strings.Join(faults, ", "))
	if s.Judged {
		s.writeJudgement(&b, line)
	} else {
		b.WriteString("  not judged: the soak stopped before the drain and the invariant check\n")
	}
	for _, odd := range s.OddAnswers {
		fmt.Fprintf(&b, "  odd answer: %s\n", odd)
	}
	for _, p := range s.Problems {
		fmt.Fprintf(&b, "  problem: %s\n", p)
	}
	if s.Judged && !s.databaseFaulted() {
		b.WriteString("  problem: Postgres was never restarted or failed over\n")
	}
	if len(s.KeptClusters) > 0 {
		fmt.Fprintf(&b, "  kept: %s (logs in %s)\n  database still running: psql %s\n", s.Dir, s.LogDir, s.DatabaseURL)
		for _, c := range s.KeptClusters {
			stop := filepath.Join(c.BinDir, "pg_ctl") + " -D " + c.DataDir + " stop"
			if os.Geteuid() == 0 {
				stop = "runuser -u nobody -- " + stop
			}
			fmt.Fprintf(&b, "  stop %s with: %s\n", filepath.Base(c.DataDir), stop)
		}
	}
	if s.OK() {
		b.WriteString("RESULT: PASS\n")
	} else {
		b.WriteString("RESULT: FAIL\n")
	}
	return b.String()
}

// writeJudgement writes what the drain, the reconciler and the invariant
// check found.
func (s Summary) writeJudgement(b *strings.Builder, line func(name, format string, args ...any)) {
	r := s.Report
	line("keys in the database", "%d (201: %d, 402: %d)", r.Keys, r.KeysCreated, r.KeysDeclined)
	line("charges", "%d succeeded, %d declined", r.Charges, r.FailedCharges)
	line("double charges", "%d%s", r.DoubleCharges, mustBeZero(r.DoubleCharges))
	line("charges without a ride", "%d%s", r.ChargesWithoutRide, mustBeZero(r.ChargesWithoutRide))
	line("keys not finished", "%d%s", r.KeysUnfinished, mustBeZero(r.KeysUnfinished))
	line("keys needing attention", "%d%s", r.KeysNeedAttention, mustBeZero(r.KeysNeedAttention))
	line("receipts", "%d sent for %d paid rides", r.Receipts, r.PaidRides)
	line("receipts missing", "%d%s", r.ReceiptsMissing, mustBeZero(r.ReceiptsMissing))
	line("receipts duplicated", "%d%s", r.ReceiptsDuplicated, mustBeZero(r.ReceiptsDuplicated))
	reconciler := s.Reconciler
	if reconciler == "" {
		reconciler = "not run (no cmd/reconciler)"
	}
	line("reconciler", "%s", reconciler)
	a := s.Acknowledged
	line("acknowledged keys", "%d (their clients got a 201 or 402)", a.Keys)
	line("acknowledged keys missing", "%d%s", a.Missing, mustBeZero(a.Missing))
	line("charges named to two keys", "%d%s", a.ChargesSharedByKeys, mustBeZero(a.ChargesSharedByKeys))
	line("stripe key reused, refused", "%d%s", a.StripeKeyMismatches, mustBeZero(a.StripeKeyMismatches))
	for _, e := range a.Examples {
		fmt.Fprintf(b, "    - %s\n", e)
	}
	line("invariant violations", "%d%s", len(r.Violations), mustBeZero(len(r.Violations)))
	for _, v := range r.Violations[:min(len(r.Violations), 20)] {
		fmt.Fprintf(b, "    - %s\n", v)
	}
}

func mustBeZero(n int) string {
	if n == 0 {
		return ""
	}
	return "  <-- must be 0"
}

func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
