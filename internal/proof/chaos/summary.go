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
	// Failover, Drill, Replication, Pooler and Network are the Config's,
	// with their defaults.
	Failover, Pooler, Network bool
	Drill                     string
	Replication               localpg.HAMode

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
	// synchronous standby did, ReadyzWaiting the times it said (503) that
	// commits waited for one (failover drill).
	ReadyzAlone, ReadyzConfirmed, ReadyzWaiting []time.Time
	// ReadyzOther counts its other answers, by status and problem code,
	// and the times it gave none ("no answer").
	ReadyzOther map[string]int
	// Acknowledged is what became of the keys whose clients got their
	// final answer, once the reconciler had run; AcknowledgedBefore
	// before it ran.
	Acknowledged, AcknowledgedBefore Acknowledged
	// StripeFaults counts the injections by kind (FaultFailNext, ...),
	// StripeFaultRequests the charge requests they targeted.
	StripeFaults        map[string]int
	StripeFaultRequests map[string]int
	// NetworkFaults counts the network nemesis's faults by kind
	// (NetReset, ...), NetworkFaultLinks by link ("api-1->postgres").
	NetworkFaults     map[string]int
	NetworkFaultLinks map[string]int

	// Reconciler is the first line of cmd/reconciler -once, when it
	// exists; ReconcilerFailed that it could not reconcile (an exit
	// status other than 0, or 1 for a finding).
	Reconciler       string
	ReconcilerFailed bool
	// ReconcilerLines are every line the reconciler printed: the summary,
	// then a line for each thing it found or did.
	ReconcilerLines []string
	// ReceiptsMailed says, in DrillAgent, for each paid ride without a
	// receipt's record, whether its receipt was mailed all the same
	// (soak.receiptsMailed).
	ReceiptsMailed map[int64]bool

	// Report is the invariant check once the drain and the reconciler
	// are done: what the soak is judged on. ReportBefore is the check
	// before the reconciler ran. Judged says the soak got that far.
	Report, ReportBefore invariant.Report
	Judged               bool

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
	// Missing are those the database does not have: a failover lost
	// them after the client was told, and nothing restored them.
	Missing int
	// ChargesSharedByKeys counts charges a 201 named for two or more
	// keys: one Stripe idempotency key used for two requests, Stripe
	// replaying the first one's charge to the second.
	ChargesSharedByKeys int
	// StripeKeyMismatches counts charges Stripe refused because their
	// idempotency key had been used with other parameters: the same
	// reuse, with a different ride or customer.
	StripeKeyMismatches int
	// Lost are the rides whose client got a 201 and that the database
	// does not have as the client was told: the key missing or not
	// finished, or its ride without the charge the 201 named.
	Lost []LostRide
	// Restored are the rides lost before the reconciler ran that are
	// back after it (only in Summary.Acknowledged).
	Restored []LostRide
	// Examples of each, for the summary.
	Examples []string
}

// LostRide is an acknowledged ride the database does not have.
type LostRide struct {
	Key, ChargeID string
}

// OK reports whether every promise held.
func (a Acknowledged) OK() bool {
	return a.Missing == 0 && len(a.Lost) == 0 && a.ChargesSharedByKeys == 0 && a.StripeKeyMismatches == 0
}

// OK reports whether the soak ran as intended and every promise held
// once the reconciler had run: no invariant violated, nothing a client
// was told lost, no odd answer. Every drill is judged alike, DrillAgent
// too: a ride the failover lost counts for nothing unless the reconciler
// put it back.
func (s Summary) OK() bool {
	return s.Judged && len(s.Problems) == 0 && s.databaseFaulted() && s.networkFaulted() && s.Report.Keys > 0 && s.readyzTold() &&
		len(s.OddAnswers) == 0 && s.Report.OK() && s.Acknowledged.OK() && !s.ReconcilerFailed
}

// readyzTold reports whether, in a failover drill, the api's /readyz
// said that a standby confirmed commits while the cluster was whole, and
// what became of commits within every window without a synchronous
// standby long enough to be seen (ReadyzMissed).
func (s Summary) readyzTold() bool {
	return !s.Failover || (len(s.ReadyzConfirmed) > 0 && len(s.ReadyzMissed()) == 0)
}

// ReadyzMissed are the windows without a synchronous standby, of
// readyzSaysAlone or longer, in which /readyz answered but never said
// what became of commits (within readyzSaysAlone after the window too):
// that the primary alone confirmed them, or in strict mode, where no
// primary confirms one alone, that they waited for a standby. A window
// /readyz never answered in, its apis killed or the machine too busy, is
// not judged: what is held is what it said, not how soon.
func (s Summary) ReadyzMissed() []window {
	var missed []window
	in := func(w window) func(time.Time) bool {
		return func(t time.Time) bool { return !t.Before(w.start) && !t.After(w.end.Add(readyzSaysAlone)) }
	}
	said := s.ReadyzAlone
	if s.Replication == localpg.HAStrict {
		said = s.ReadyzWaiting
	}
	for _, w := range s.Degraded {
		if w.end.Sub(w.start) < readyzSaysAlone || slices.ContainsFunc(said, in(w)) {
			continue
		}
		if slices.ContainsFunc(s.ReadyzConfirmed, in(w)) {
			missed = append(missed, w)
		}
	}
	return missed
}

// databaseFaulted reports whether the database went away at least once:
// a restart, or with the drill a failover.
func (s Summary) databaseFaulted() bool {
	if s.Failover {
		return len(s.Rounds) > 0
	}
	return s.PostgresRestarts > 0
}

// networkFaulted reports whether, with the network nemesis, it injected
// a fault at least once.
func (s Summary) networkFaulted() bool {
	return !s.Network || len(s.NetworkFaults) > 0
}

// mode names what the soak ran against, beyond one Postgres.
func (s Summary) mode() string {
	network := ""
	if s.Network {
		network = ", network nemesis on every link"
	}
	switch {
	case s.Failover && s.Replication == localpg.HAAsync:
		return ", " + s.Drill + " drill on Patroni, asynchronous replication"
	case s.Failover:
		return ", " + s.Drill + " drill on Patroni, synchronous mode " + string(s.Replication) + ", ttl " + localpg.HATTL.String()
	case s.Pooler:
		return ", through PgBouncer (transaction mode)" + network
	}
	return network
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
	if s.Network {
		var kinds []string
		for _, kind := range networkFaultKinds {
			kinds = append(kinds, fmt.Sprintf("%s %d", kind, s.NetworkFaults[kind]))
		}
		line("network faults injected", "%s", strings.Join(kinds, ", "))
		line("  by link", "%s", counts(s.NetworkFaultLinks))
	}
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
	if s.Judged && !s.networkFaulted() {
		b.WriteString("  problem: the network nemesis injected nothing\n")
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
	for i, r := range s.Rounds {
		name := fmt.Sprintf("  round %d", i+1)
		switch s.Drill {
		case DrillStandby:
			line(name, "standby %s killed, back %s later; a synchronous standby again %s after the kill",
				r.node, r.down.Round(time.Millisecond), r.rejoined.Round(time.Millisecond))
		case DrillAgent:
			line(name, "%s's Patroni killed -> the other node promoted %s after it; %s rewound and synchronous again %s after the kill",
				r.node, r.promoted.Round(time.Millisecond), r.node, r.rejoined.Round(time.Millisecond))
		default:
			line(name, "replication stalled %s; leader %s killed -> promoted %s after it; rejoined as synchronous standby %s after the kill",
				r.stalled.Round(time.Millisecond), r.node, r.promoted.Round(time.Millisecond), r.rejoined.Round(time.Millisecond))
		}
		first := "first 201 after the kill " + firstOK(r.firstAfterKill)
		if s.Drill != DrillStandby {
			first += ", after the promotion " + firstOK(r.firstOK)
		}
		line("", "    %s; writes blocked %s", first, r.blockedFor())
		line("", "    %d rides created from the kill until %s was back", r.created, r.node)
		if s.Drill == DrillAgent {
			line("", "    clients were told meanwhile: %s", counts(r.answers))
		}
	}
	var total time.Duration
	var spans []string
	for _, w := range s.Degraded {
		total += w.end.Sub(w.start)
		spans = append(spans, w.end.Sub(w.start).Round(100*time.Millisecond).String())
	}
	cost, saying := "durability degraded", "the primary alone confirmed commits"
	if s.Replication == localpg.HAStrict {
		cost, saying = "commits held", "commits waited"
	}
	line("no synchronous standby", "%d windows, %s in all (%s): %s", len(s.Degraded), total.Round(100*time.Millisecond), strings.Join(spans, ", "), cost)
	held := 0
	for _, w := range s.Degraded {
		if w.end.Sub(w.start) >= readyzSaysAlone {
			held++
		}
	}
	missed := len(s.ReadyzMissed())
	line("/readyz said so", "%s in %d of the %d windows of %s or more%s", saying, held-missed, held, readyzSaysAlone, mustBeZero(missed))
	line("/readyz answers", "%q %d times, %q %d times, %q (503) %d times%s; otherwise %s", readyzAlone, len(s.ReadyzAlone),
		readyzConfirmed, len(s.ReadyzConfirmed), readyzWaiting, len(s.ReadyzWaiting), mustBePositive(len(s.ReadyzConfirmed)), counts(s.ReadyzOther))
}

// firstOK says when the first 201 came, from the fault.
func firstOK(d time.Duration) string {
	if d == 0 {
		return "none within " + firstCreatedWait.String()
	}
	return d.Round(time.Millisecond).String()
}

// blockedFor says how long writes were blocked, and when, from the kill.
func (r round) blockedFor() string {
	at := func(t time.Time) string {
		if d := t.Sub(r.killed); d < 0 {
			return (-d).Round(time.Millisecond).String() + " before the kill"
		}
		return t.Sub(r.killed).Round(time.Millisecond).String() + " after it"
	}
	if r.blocked.end.IsZero() {
		return fmt.Sprintf("still: no 201 from %s until %s after the rejoin", at(r.blocked.start), firstCreatedWait)
	}
	return fmt.Sprintf("%s (no 201 from %s to %s)", r.blocked.end.Sub(r.blocked.start).Round(time.Millisecond), at(r.blocked.start), at(r.blocked.end))
}

// writeJudgement writes what the drain, the reconciler and the invariant
// check found: after the reconciler ran, and before it where that
// differs.
func (s Summary) writeJudgement(b *strings.Builder, line func(name, format string, args ...any)) {
	r, r0 := s.Report, s.ReportBefore
	line("keys in the database", "%d (201: %d, 402: %d)", r.Keys, r.KeysCreated, r.KeysDeclined)
	line("charges", "%d succeeded, %d declined", r.Charges, r.FailedCharges)
	line("double charges", "%s%s", beforeAfter(r0.DoubleCharges, r.DoubleCharges), mustBeZero(r.DoubleCharges))
	line("charges without a ride", "%s%s", beforeAfter(r0.ChargesWithoutRide, r.ChargesWithoutRide), mustBeZero(r.ChargesWithoutRide))
	line("keys not finished", "%s%s", beforeAfter(r0.KeysUnfinished, r.KeysUnfinished), mustBeZero(r.KeysUnfinished))
	line("keys needing attention", "%s%s", beforeAfter(r0.KeysNeedAttention, r.KeysNeedAttention), mustBeZero(r.KeysNeedAttention))
	line("receipts", "%d sent for %d paid rides", r.Receipts, r.PaidRides)
	line("receipts missing", "%s%s", beforeAfter(r0.ReceiptsMissing, r.ReceiptsMissing), mustBeZero(r.ReceiptsMissing))
	line("receipts duplicated", "%s%s", beforeAfter(r0.ReceiptsDuplicated, r.ReceiptsDuplicated), mustBeZero(r.ReceiptsDuplicated))
	reconciler := s.Reconciler
	if reconciler == "" {
		reconciler = "not run (no cmd/reconciler)"
	}
	line("reconciler", "%s", reconciler)
	if len(s.ReconcilerLines) > 1 {
		found := s.ReconcilerLines[1:]
		for _, l := range found[:min(len(found), 20)] {
			fmt.Fprintf(b, "    - %s\n", l)
		}
		if len(found) > 20 {
			fmt.Fprintf(b, "    - and %d more\n", len(found)-20)
		}
	}
	a, a0 := s.Acknowledged, s.AcknowledgedBefore
	line("acknowledged keys", "%d (their clients got a 201 or 402)", a.Keys)
	line("acknowledged keys missing", "%s%s", beforeAfter(a0.Missing, a.Missing), mustBeZero(a.Missing))
	line("charges named to two keys", "%d%s", a.ChargesSharedByKeys, mustBeZero(a.ChargesSharedByKeys))
	line("stripe key reused, refused", "%d%s", a.StripeKeyMismatches, mustBeZero(a.StripeKeyMismatches))
	lost := fmt.Sprintf("%d", len(a0.Lost))
	if len(a0.Lost) > 0 || len(a.Lost) > 0 {
		lost += fmt.Sprintf(", restored by the reconciler: %d, still lost: %d%s", len(a.Restored), len(a.Lost), mustBeZero(len(a.Lost)))
	}
	line("acknowledged rides lost", "%s", lost)
	for _, l := range a.Lost[:min(len(a.Lost), 20)] {
		fmt.Fprintf(b, "    - key %s, charge %s: still lost\n", l.Key, l.ChargeID)
	}
	for _, l := range a.Restored[:min(len(a.Restored), max(0, 20-len(a.Lost)))] {
		fmt.Fprintf(b, "    - key %s, charge %s: restored\n", l.Key, l.ChargeID)
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
	line("invariant violations", "%s%s", beforeAfter(len(r0.Violations), len(r.Violations)), mustBeZero(len(r.Violations)))
	for _, v := range r.Violations[:min(len(r.Violations), 20)] {
		fmt.Fprintf(b, "    - %s\n", v)
	}
}

// beforeAfter is a figure as the reconciler left it, with the figure
// before it ran when that differs.
func beforeAfter(before, after int) string {
	if before == after {
		return fmt.Sprintf("%d", after)
	}
	return fmt.Sprintf("%d before the reconciler, %d after", before, after)
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
