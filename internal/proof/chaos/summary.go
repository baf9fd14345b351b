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
	// Failover, Drill, AsyncReplication and Pooler are the Config's.
	Failover, AsyncReplication, Pooler bool
	Drill                              string

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
	// Rounds are the failover drill's rounds, as timed (Config.Failover).
	Rounds []round
	// Degraded are the windows in which no standby was synchronous, as
	// Patroni's REST API said: the leader acknowledged commits only it
	// had. The api's /readyz and the console are to say so within each.
	Degraded []window
	// ReadyzAlone are the times the api's /readyz said that the primary
	// alone confirmed commits, ReadyzConfirmed the times it said a
	// synchronous standby did (failover drill).
	ReadyzAlone, ReadyzConfirmed []time.Time
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
	// ReconcilerLines are every line the reconciler printed: the summary,
	// then a discrepancy a line. ChargesWithoutRide are the charges it
	// reported as charges without a ride.
	ReconcilerLines    []string
	ChargesWithoutRide map[string]bool
	// ReceiptsMailed says, in DrillAgent, for each paid ride without a
	// receipt's record, whether its receipt was mailed all the same
	// (soak.receiptsMailed).
	ReceiptsMailed map[int64]bool

	// Report is the invariant check after the drain; Judged that the
	// soak got that far.
	Report invariant.Report
	Judged bool

	// Problems are failures of the soak itself: a process that did not
	// come back, a drain that timed out. Any makes the soak fail.
	Problems []string

	// Dir holds the scratch cluster, the processes' logs and the mail.
	Dir, LogDir, DatabaseURL string
	// KeptClusters are the scratch clusters left running by Config.Keep
	// (the one cluster); KeptHA is the directory of the Patroni cluster
	// left running with Config.Failover.
	KeptClusters []localpg.Cluster
	KeptHA       string
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
	// Lost are the missing keys whose client got a 201, with their
	// charge, and whether the reconciler reported it as a charge without
	// a ride. Only DrillAgent may lose any, and only reported.
	Lost []LostRide
	// Examples of each, for the summary.
	Examples []string
}

// LostRide is an acknowledged ride the database no longer has.
type LostRide struct {
	Key, ChargeID string
	Reported      bool
}

// OK reports whether every promise held.
func (a Acknowledged) OK() bool {
	return a.Missing == 0 && a.ChargesSharedByKeys == 0 && a.StripeKeyMismatches == 0
}

// OK reports whether the soak ran as intended and every promise held.
// DrillAgent breaks them by design (no watchdog: two primaries): it
// passes when the reconciler reports every acknowledged ride lost and
// every charge left without a ride, and nothing else is wrong. Stripe's
// refusal of a key the two primaries each used for a different ride, and
// the 502 its client got, are the fork caught, not a loss: they are
// counted, not failed.
func (s Summary) OK() bool {
	ran := s.Judged && len(s.Problems) == 0 && s.databaseFaulted() && s.Report.Keys > 0 && s.readyzTold()
	if s.Drill == DrillAgent {
		return ran && s.lossesReported()
	}
	return ran && len(s.OddAnswers) == 0 && s.Report.OK() && s.Acknowledged.OK() && !s.ReconcilerFailed
}

// readyzTold reports whether, in a failover drill, the api's /readyz
// said that a standby confirmed commits while the cluster was whole, and
// that the primary alone did within every window without a synchronous
// standby long enough to be seen (ReadyzMissed).
func (s Summary) readyzTold() bool {
	return !s.Failover || (len(s.ReadyzConfirmed) > 0 && len(s.ReadyzMissed()) == 0)
}

// ReadyzMissed are the windows without a synchronous standby, of
// readyzSaysAlone or longer, in which /readyz answered but never said that
// the primary alone confirmed commits (within readyzSaysAlone after the
// window too). A window /readyz never answered in, its apis killed or the
// machine too busy, is not judged: what is held is what it said, not how
// soon.
func (s Summary) ReadyzMissed() []window {
	var missed []window
	in := func(w window) func(time.Time) bool {
		return func(t time.Time) bool { return !t.Before(w.start) && !t.After(w.end.Add(readyzSaysAlone)) }
	}
	for _, w := range s.Degraded {
		if w.end.Sub(w.start) < readyzSaysAlone || slices.ContainsFunc(s.ReadyzAlone, in(w)) {
			continue
		}
		if slices.ContainsFunc(s.ReadyzConfirmed, in(w)) {
			missed = append(missed, w)
		}
	}
	return missed
}

// lossesReported reports whether every acknowledged ride lost is
// reported by the reconciler, and every charge without a ride the
// invariant check or the reconciler found is one it reported, with
// nothing else wrong.
func (s Summary) lossesReported() bool {
	a := s.Acknowledged
	if a.ChargesSharedByKeys != 0 || s.Reconciler == "" {
		return false
	}
	for _, l := range a.Lost {
		if !l.Reported {
			return false
		}
	}
	for _, v := range s.Report.Violations {
		switch {
		case v.Kind == invariant.ChargeWithoutRide && s.ChargesWithoutRide[v.ChargeID]:
		case v.Kind == invariant.ReceiptMissing && s.ReceiptsMailed[v.RideID]:
		default:
			return false
		}
	}
	for _, line := range s.ReconcilerLines[min(1, len(s.ReconcilerLines)):] {
		if !strings.HasPrefix(line, "charge_without_ride ") {
			return false
		}
	}
	return true
}

// databaseFaulted reports whether the database went away at least once:
// a restart, or with the drill a failover.
func (s Summary) databaseFaulted() bool {
	if s.Failover {
		return len(s.Rounds) > 0
	}
	return s.PostgresRestarts > 0
}

// mode names what the soak ran against, beyond one Postgres.
func (s Summary) mode() string {
	switch {
	case s.Failover && s.AsyncReplication:
		return ", " + s.Drill + " drill on Patroni, asynchronous replication"
	case s.Failover:
		return ", " + s.Drill + " drill on Patroni, synchronous mode, ttl " + localpg.HATTL.String()
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
		s.writeRounds(&b, line)
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
	if s.KeptHA != "" {
		fmt.Fprintf(&b, "  kept: %s (logs in %s)\n  database still running: psql '%s'\n", s.Dir, s.LogDir, s.DatabaseURL)
		fmt.Fprintf(&b, "  stop the Patroni cluster with: kill $(pgrep -f %s)\n", s.KeptHA)
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

// writeRounds writes the failover drill's rounds and the windows without
// a synchronous standby.
func (s Summary) writeRounds(b *strings.Builder, line func(name, format string, args ...any)) {
	line("drill rounds", "%d (%s)", len(s.Rounds), s.Drill)
	firstOK := func(d time.Duration) string {
		if d == 0 {
			return "none within " + firstCreatedWait.String()
		}
		return d.Round(time.Millisecond).String()
	}
	for i, r := range s.Rounds {
		name := fmt.Sprintf("  round %d", i+1)
		switch s.Drill {
		case DrillStandby:
			line(name, "standby %s killed -> first 201 %s; %d rides created without it; a synchronous standby again %s after the kill",
				r.node, firstOK(r.firstOK), r.created, r.rejoined.Round(time.Millisecond))
		case DrillAgent:
			line(name, "%s's Patroni killed -> the other node promoted %s, -> first 201 after it %s; %s rewound and synchronous again %s after the kill",
				r.node, r.promoted.Round(time.Millisecond), firstOK(r.firstOK), r.node, r.rejoined.Round(time.Millisecond))
			line("", "    clients were told meanwhile: %s", counts(r.answers))
		default:
			line(name, "replication stalled %s; leader %s killed -> promoted %s, -> first 201 %s; rejoined as synchronous standby %s after the kill",
				r.stalled.Round(time.Millisecond), r.node, r.promoted.Round(time.Millisecond), firstOK(r.firstOK), r.rejoined.Round(time.Millisecond))
		}
	}
	var total time.Duration
	var spans []string
	for _, w := range s.Degraded {
		total += w.end.Sub(w.start)
		spans = append(spans, w.end.Sub(w.start).Round(100*time.Millisecond).String())
	}
	line("no synchronous standby", "%d windows, %s in all (%s): durability degraded", len(s.Degraded), total.Round(100*time.Millisecond), strings.Join(spans, ", "))
	held := 0
	for _, w := range s.Degraded {
		if w.end.Sub(w.start) >= readyzSaysAlone {
			held++
		}
	}
	missed := len(s.ReadyzMissed())
	line("/readyz said so", "in %d of the %d windows of %s or more%s", held-missed, held, readyzSaysAlone, mustBeZero(missed))
	line("/readyz answers", "%q %d times, %q %d times%s", readyzAlone, len(s.ReadyzAlone), readyzConfirmed, len(s.ReadyzConfirmed), mustBePositive(len(s.ReadyzConfirmed)))
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
	if len(a.Lost) > 0 {
		reported := 0
		for _, l := range a.Lost {
			if l.Reported {
				reported++
			}
		}
		line("acknowledged rides lost", "%d, of which the reconciler reported %d as charges without a ride", len(a.Lost), reported)
		for _, l := range a.Lost {
			fmt.Fprintf(b, "    - key %s, charge %s, reported: %t\n", l.Key, l.ChargeID, l.Reported)
		}
	}
	for _, e := range a.Examples {
		fmt.Fprintf(b, "    - %s\n", e)
	}
	if len(s.ReceiptsMailed) > 0 {
		mailed := 0
		for _, ok := range s.ReceiptsMailed {
			if ok {
				mailed++
			}
		}
		line("receipt records lost", "%d, of which %d receipts were mailed all the same (their record went with the old leader's timeline)", len(s.ReceiptsMailed), mailed)
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

func mustBePositive(n int) string {
	if n > 0 {
		return ""
	}
	return "  <-- must be more than 0"
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
