package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/jobs"
	"github.com/rocketrides/rocketrides/internal/platform/mail"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet"
	"github.com/rocketrides/rocketrides/internal/testkit/invariant"
)

// The failover drills. The soak runs against a Patroni cluster (etcd and
// two nodes, localpg.HA) reached through a multi-host URL with
// target_session_attrs=read-write. Nothing here promotes a node: each
// drill hurts the cluster as real clusters get hurt, Patroni alone
// decides what follows, and the drill waits for the cluster to be whole
// again (the hurt node a synchronous standby, by Patroni's REST /sync)
// before the next round:
//
//   - DrillLeader: the leader dies as a machine does (its Patroni, its
//     postmaster and every Postgres process SIGKILLed together), with
//     replication held back a moment before (SIGSTOP of the WAL senders)
//     so that commits are in flight. Patroni promotes the synchronous
//     standby once the leader lock expires; the killed node is started
//     again and rewinds and rejoins by itself.
//   - DrillStandby: the synchronous standby dies the same way and comes
//     back a few seconds later. Relaxed, writes go on meanwhile, on one
//     machine: durability is degraded. Strict, they wait until it is
//     back, which the round reports as the time writes were blocked.
//   - DrillAgent: only the leader's Patroni dies; its Postgres lives on.
//     Without a watchdog nothing stops it, the standby is promoted when
//     the lock expires, and for a while both nodes are primaries. Patroni,
//     started again, demotes and rewinds the old leader, throwing away
//     what it committed meanwhile. Relaxed, it first empties
//     synchronous_standby_names, which releases the commits the old
//     leader held as acknowledged; strict, it holds them until the
//     demotion ends their sessions. The drill is judged like the others,
//     once the reconciler has restored what it can.
//
// Each round times, from the fault, the first 201 after it and the
// longest time without one, from the last 201 before the fault to the
// first after the hurt node is back: how long writes were blocked, as
// the clients saw it (their backoff, at most maxBackoff, included).
//
// One api instance pauses each request between Stripe's answer and the
// phase that records the charge (the after_charge failpoint), so that the
// faults find charges made and not yet recorded. A monitor samples the
// cluster all along and records each window in which no standby was
// synchronous. After the drain, beyond the soak's invariants,
// checkAcknowledged looks for keys whose 2xx a client received and that
// the database no longer has, and for Stripe idempotency keys used for
// two different requests.

// The drills, Config.Drill.
const (
	DrillLeader  = "leader"
	DrillStandby = "standby"
	DrillAgent   = "agent"
)

// afterChargePause is how long one api instance holds each charge in the
// window between Stripe and the database.
const afterChargePause = 1500 * time.Millisecond

// startDatabase starts the scratch database the soak runs against: one
// cluster, or a Patroni cluster with Config.Failover, and PgBouncer in
// front with Config.Pooler.
func (s *soak) startDatabase(ctx context.Context, dbName string) error {
	if s.cfg.Failover {
		s.progress("starting etcd and two Patroni nodes (%s, ttl %s) in %s", s.cfg.Replication, localpg.HATTL, s.dir)
		h, err := localpg.NewHA(localpg.HAOptions{
			Dir: filepath.Join(s.dir, "ha"), Port: s.cfg.HAPort, Mode: s.cfg.Replication,
		})
		if err != nil {
			return err
		}
		// Torn down even when Start fails half way.
		s.ha = h
		if err := h.Start(ctx); err != nil {
			return err
		}
		if err := h.CreateDatabase(ctx, dbName); err != nil {
			return err
		}
		s.dbURL = h.DatabaseURL(dbName)
		s.pooledURL = s.dbURL
		return nil
	}

	port, err := fleet.FreePort()
	if err != nil {
		return err
	}
	s.progress("starting a scratch Postgres cluster in %s", s.dir)
	// The cluster is torn down even when Start fails half way.
	c, err := localpg.New(localpg.Options{DataDir: filepath.Join(s.dir, "postgres"), Port: port})
	if err != nil {
		return err
	}
	s.cluster = &c
	if err := c.Start(ctx); err != nil {
		return err
	}
	if err := c.CreateDatabase(ctx, dbName); err != nil {
		return err
	}
	s.dbURL = c.DatabaseURL(dbName)
	s.pooledURL = s.dbURL
	if !s.cfg.Pooler {
		return nil
	}
	poolerPort, err := fleet.FreePort()
	if err != nil {
		return err
	}
	s.progress("starting PgBouncer (transaction mode) in front of it")
	p, err := localpg.NewPooler(localpg.PoolerOptions{Dir: filepath.Join(s.dir, "pgbouncer"), Port: poolerPort, UpstreamPort: c.Port})
	if err != nil {
		return err
	}
	s.pooler = p
	if err := p.Start(ctx); err != nil {
		return err
	}
	// cache_describe: no named prepared statements, which would not
	// survive from one transaction to the next behind the pooler
	// (docs/scaling.md says why not exec).
	s.pooledURL = p.DatabaseURL(dbName) + "&default_query_exec_mode=cache_describe"
	return nil
}

// round is one round of a drill as it was timed, each time from the
// fault.
type round struct {
	node    string        // the node hurt
	killed  time.Time     // the fault
	stalled time.Duration // how long replication was held back before (DrillLeader)
	down    time.Duration // how long the standby stayed down (DrillStandby)
	// promoted: the other node took writes (DrillLeader, DrillAgent).
	promoted time.Duration
	// firstOK: the first 201 after the promotion, or after the fault
	// with DrillStandby, where there is none.
	firstOK time.Duration
	// firstAfterKill: the first 201 after the fault.
	firstAfterKill time.Duration
	// blocked is the longest time without a 201 from the last one before
	// the fault to the first after the rejoin: writes blocked. Its end is
	// zero when none came within firstCreatedWait of the rejoin.
	blocked window
	// rejoined: the hurt node is a synchronous standby again (Patroni's
	// REST /sync answers 200 on it).
	rejoined time.Duration
	// created counts the 201s received between the fault and the rejoin:
	// with DrillStandby, the writes that went on without a standby.
	created int
	// answers counts what the clients were told between the fault and
	// the rejoin, by status (DrillAgent).
	answers map[string]int
}

// window is a time during which no standby was synchronous.
type window struct{ start, end time.Time }

// drill runs Config.Kills rounds of Config.Drill, the first after a few
// seconds of traffic, each once the cluster is whole again. It does not
// stop with the chaos phase: the soak waits for its rounds. A round the
// cluster does not come back from aborts the soak.
func (m *monkey) drill(ctx context.Context, cfg Config, h *localpg.HA, tr *traffic, abort context.CancelCauseFunc) {
	for i := range cfg.Kills {
		if !sleep(ctx, nil, m.between(3*time.Second, 6*time.Second)) {
			return
		}
		var (
			r   round
			err error
		)
		switch cfg.Drill {
		case DrillStandby:
			r, err = m.loseStandby(ctx, h, tr)
		case DrillAgent:
			r, err = m.killAgent(ctx, h, tr)
		default:
			r, err = m.killLeader(ctx, h, tr)
		}
		if err != nil {
			m.faults.problem("%s drill, round %d: %v", cfg.Drill, i+1, err)
			abort(fmt.Errorf("%s drill, round %d: the cluster did not come back: %w", cfg.Drill, i+1, err))
			return
		}
		m.faults.count(func(fs *faults) { fs.rounds = append(fs.rounds, r) })
	}
}

// killLeader is a round of DrillLeader.
func (m *monkey) killLeader(ctx context.Context, h *localpg.HA, tr *traffic) (round, error) {
	leader, err := h.Leader(ctx)
	if err != nil {
		return round{}, err
	}
	r := round{node: leader.Name, stalled: m.between(200*time.Millisecond, 1500*time.Millisecond)}
	resume, err := leader.Postgres().StallReplication()
	if err != nil {
		return round{}, fmt.Errorf("stall replication: %w", err)
	}
	m.progress("replication stalled for %s, then the leader %s dies (Patroni and Postgres, SIGKILL)", r.stalled.Round(time.Millisecond), leader.Name)
	sleep(ctx, nil, r.stalled)
	if err := leader.Kill(); err != nil {
		return round{}, errors.Join(err, resume())
	}
	killed := time.Now()
	r.killed = killed
	// The senders are dead; resuming them is a formality.
	_ = resume()
	promoted, err := h.AwaitLeader(ctx)
	if err != nil {
		return round{}, err
	}
	r.promoted = time.Since(killed)
	m.progress("Patroni promoted %s %s after the kill; starting %s again", promoted.Name, r.promoted.Round(time.Millisecond), leader.Name)
	err = m.rejoin(ctx, leader, tr, killed, &r)
	r.firstOK = firstCreated(ctx, tr, killed, killed.Add(r.promoted))
	measure(ctx, tr, &r)
	return r, err
}

// loseStandby is a round of DrillStandby.
func (m *monkey) loseStandby(ctx context.Context, h *localpg.HA, tr *traffic) (round, error) {
	leader, err := h.Leader(ctx)
	if err != nil {
		return round{}, err
	}
	standby := h.Other(leader)
	down := m.between(3*time.Second, 6*time.Second)
	r := round{node: standby.Name, down: down}
	m.progress("the standby %s dies (Patroni and Postgres, SIGKILL); back in %s", standby.Name, down.Round(time.Millisecond))
	if err := standby.Kill(); err != nil {
		return round{}, err
	}
	killed := time.Now()
	r.killed = killed
	sleep(ctx, nil, time.Until(killed.Add(down)))
	err = m.rejoin(ctx, standby, tr, killed, &r)
	r.firstOK = firstCreated(ctx, tr, killed, killed)
	measure(ctx, tr, &r)
	return r, err
}

// killAgent is a round of DrillAgent.
func (m *monkey) killAgent(ctx context.Context, h *localpg.HA, tr *traffic) (round, error) {
	leader, err := h.Leader(ctx)
	if err != nil {
		return round{}, err
	}
	r := round{node: leader.Name}
	before := tr.answerCounts()
	m.progress("the leader %s's Patroni dies (SIGKILL); its Postgres lives on", leader.Name)
	if err := leader.KillAgent(); err != nil {
		return round{}, err
	}
	killed := time.Now()
	r.killed = killed
	promoted, err := h.AwaitLeader(ctx)
	if err != nil {
		return round{}, err
	}
	r.promoted = time.Since(killed)
	// As a supervisor would, a little later: meanwhile both nodes take
	// writes.
	both := m.between(time.Second, 4*time.Second)
	m.progress("Patroni promoted %s %s after the kill; %s still runs as a primary; its Patroni back in %s",
		promoted.Name, r.promoted.Round(time.Millisecond), leader.Name, both.Round(time.Millisecond))
	sleep(ctx, nil, both)
	err = m.rejoin(ctx, leader, tr, killed, &r)
	r.firstOK = firstCreated(ctx, tr, killed, killed.Add(r.promoted))
	measure(ctx, tr, &r)
	r.answers = diffCounts(tr.answerCounts(), before)
	return r, err
}

// rejoin starts node's Patroni again and waits until it is a synchronous
// standby (DrillAgent: Patroni adopts the Postgres still running, demotes
// and rewinds it).
func (m *monkey) rejoin(ctx context.Context, node *localpg.HANode, tr *traffic, killed time.Time, r *round) error {
	if err := node.Start(ctx); err != nil {
		return err
	}
	// Asynchronous, a standby is never synchronous: streaming is all.
	check, back := "/sync", "a synchronous standby"
	if m.mode == localpg.HAAsync {
		check, back = "/replica", "a streaming standby"
	}
	if err := node.Await(ctx, check); err != nil {
		return err
	}
	r.rejoined = time.Since(killed)
	r.created = tr.createdBetween(killed, killed.Add(r.rejoined))
	m.progress("%s is %s again %s after the fault; %d rides created meanwhile",
		node.Name, back, r.rejoined.Round(time.Millisecond), r.created)
	return nil
}

// firstCreatedWait bounds the wait for the first 201 after a fault.
const firstCreatedWait = time.Minute

// firstCreated waits for the first 201 after t, and returns how long
// after from it came (the 201s are timestamped as they come, so a round
// asks once the hurt node is back, and the wait delays nothing it
// measures); zero when none came within a minute (the clients
// may be backing off, or every one may be waiting).
func firstCreated(ctx context.Context, tr *traffic, from, t time.Time) time.Duration {
	deadline := time.Now().Add(firstCreatedWait)
	for time.Now().Before(deadline) {
		if ok := tr.firstCreatedAfter(t); !ok.IsZero() {
			return ok.Sub(from)
		}
		if !sleep(ctx, nil, 50*time.Millisecond) {
			break
		}
	}
	return 0
}

// measure times the round's writes once the hurt node is back: the first
// 201 after the fault, and, once a 201 came after the rejoin, the longest
// time without one across the round. A round whose node did not come
// back ends the soak untimed.
func measure(ctx context.Context, tr *traffic, r *round) {
	if r.rejoined == 0 {
		return
	}
	r.firstAfterKill = firstCreated(ctx, tr, r.killed, r.killed)
	back := r.killed.Add(r.rejoined)
	firstCreated(ctx, tr, back, back)
	r.blocked = longestGap(tr.writes(), r.killed, back)
}

// longestGap is the longest time without a write across from to to:
// between two writes one after the other, counting the last write at or
// before from (from itself when there was none) and the first write after
// to. Its end is zero when no write came after to: writes are still
// blocked.
func longestGap(writes []time.Time, from, to time.Time) window {
	start, i := from, 0
	for ; i < len(writes) && !writes[i].After(from); i++ {
		start = writes[i]
	}
	var longest window
	for ; i < len(writes); i++ {
		if writes[i].Sub(start) > longest.end.Sub(longest.start) {
			longest = window{start, writes[i]}
		}
		if writes[i].After(to) {
			return longest
		}
		start = writes[i]
	}
	return window{start: start}
}

// monitorSync samples the cluster until stop is closed and records each
// window in which no member was a synchronous standby, as Patroni's REST
// API says (the standby it may promote): the time the leader acknowledged
// commits that only it had. It is what the api's /readyz is checked
// against.
func monitorSync(ctx context.Context, stop <-chan struct{}, h *localpg.HA, f *faults) {
	var open time.Time
	for {
		members, err := h.Members(ctx)
		synchronous := err == nil && slices.ContainsFunc(members, func(m localpg.Member) bool {
			return m.Role == "sync_standby" && (m.State == "running" || m.State == "streaming")
		})
		now := time.Now()
		switch {
		case !synchronous && open.IsZero():
			open = now
		case synchronous && !open.IsZero():
			f.count(func(f *faults) { f.degraded = append(f.degraded, window{open, now}) })
			open = time.Time{}
		}
		if !sleep(ctx, stop, 100*time.Millisecond) {
			if !open.IsZero() {
				f.count(func(f *faults) { f.degraded = append(f.degraded, window{open, time.Now()}) })
			}
			return
		}
	}
}

// What /readyz says of who confirms commits (db.Durability): the
// primary alone while no standby is synchronous (relaxed), and the
// primary with a synchronous standby while the cluster is whole. Its 503
// says commits wait for a standby that is not there (strict).
const (
	readyzAlone     = "confirmed by the primary alone"
	readyzConfirmed = "confirmed by the primary and a synchronous standby"
	readyzWaiting   = "database_commits_waiting"
)

// readyzSaysAlone is how long a window without a synchronous standby may
// last before /readyz must have said so within it: Patroni's REST API,
// which monitorSync reads, and Postgres, which /readyz reads, change
// state a moment apart, and an api may be down between its kill and its
// restart.
const readyzSaysAlone = 5 * time.Second

// monitorReadyz asks a random api's /readyz every quarter second until
// stop is closed, and records when it said that the primary alone
// confirms commits, that commits wait for a standby (strict mode, or a
// leader Patroni lost track of), and how often it said that a standby
// confirms them: the drill holds /readyz to the windows monitorSync
// records (Summary.ReadyzMissed). Any other answer, or none, is counted
// by its status and problem code.
func monitorReadyz(ctx context.Context, stop <-chan struct{}, apis []string, rng *rand.Rand, f *faults) {
	client := &http.Client{Timeout: 2 * time.Second}
	for sleep(ctx, stop, 250*time.Millisecond) {
		resp, err := client.Get(apis[rng.IntN(len(apis))] + "/readyz")
		if err != nil {
			f.count(func(f *faults) { f.readyzOther["no answer"]++ })
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		_ = resp.Body.Close()
		now := time.Now()
		switch {
		case strings.Contains(string(body), readyzAlone):
			f.count(func(f *faults) { f.readyzAlone = append(f.readyzAlone, now) })
		case strings.Contains(string(body), readyzConfirmed):
			f.count(func(f *faults) { f.readyzConfirmed = append(f.readyzConfirmed, now) })
		case strings.Contains(string(body), readyzWaiting):
			f.count(func(f *faults) { f.readyzWaiting = append(f.readyzWaiting, now) })
		default:
			var problem struct {
				Code string `json:"code"`
			}
			_ = json.Unmarshal(body, &problem)
			answer := strings.TrimSpace(strconv.Itoa(resp.StatusCode) + " " + problem.Code)
			f.count(func(f *faults) { f.readyzOther[answer]++ })
		}
	}
}

// receiptsMailed finds, for each ride the invariant check reports as
// paid without a receipt, whether its receipt was mailed all the same:
// the soak's mail directory holds the ride's receipt, naming the ride's
// charge. With two primaries at once (DrillAgent) the worker is split
// too: its pool reaches both, so it can mail a receipt and record it on
// the old leader, whose timeline pg_rewind then discards, while River
// completes the job on the new one. The customer has the receipt; only
// its record is gone.
func (s *soak) receiptsMailed(ctx context.Context, report invariant.Report) (map[int64]bool, error) {
	mailed := map[int64]bool{}
	for _, v := range report.Violations {
		if v.Kind != invariant.ReceiptMissing {
			continue
		}
		rideID := v.RideID
		var charge string
		if err := s.pool.QueryRow(ctx, `SELECT stripe_charge_id FROM rides WHERE id = $1`, rideID).Scan(&charge); err != nil {
			return nil, fmt.Errorf("ride %d's charge: %w", rideID, err)
		}
		msg, err := os.ReadFile(filepath.Join(s.dir, "mail", mail.FileName(jobs.ReceiptMessageID(rideID))))
		mailed[rideID] = err == nil && strings.Contains(string(msg), "Charge:  "+charge+"\n")
	}
	return mailed, nil
}

// storedKey is an idempotency key as the database holds it, with the
// charge of its ride.
type storedKey struct {
	Key      string
	Finished bool
	ChargeID string
}

// checkAcknowledged compares what the clients were told with what the
// database and Stripe hold. A ride a client was told about (a 201) is
// there when its key is finished and its ride carries the charge the 201
// named.
func (s *soak) checkAcknowledged(ctx context.Context) (Acknowledged, error) {
	s.traffic.mu.Lock()
	acked := maps.Clone(s.traffic.acknowledged)
	s.traffic.mu.Unlock()

	rows, err := s.pool.Query(ctx, `
		SELECT k.idempotency_key, k.recovery_point = 'finished', coalesce(r.stripe_charge_id, '')
		FROM idempotency_keys k LEFT JOIN rides r ON r.idempotency_key_id = k.id`)
	if err != nil {
		return Acknowledged{}, fmt.Errorf("read idempotency keys: %w", err)
	}
	stored, err := pgx.CollectRows(rows, pgx.RowToStructByPos[storedKey])
	if err != nil {
		return Acknowledged{}, fmt.Errorf("read idempotency keys: %w", err)
	}
	inDB := make(map[string]storedKey, len(stored))
	for _, k := range stored {
		inDB[k.Key] = k
	}

	var c Acknowledged
	keysByCharge := map[string][]string{}
	for _, key := range slices.Sorted(maps.Keys(acked)) {
		a := acked[key]
		c.Keys++
		k, ok := inDB[key]
		if !ok {
			c.Missing++
			if len(c.Examples) < 10 {
				c.Examples = append(c.Examples, fmt.Sprintf("key %s answered %d is not in the database", key, a.status))
			}
		}
		if a.chargeID != "" {
			if !ok || !k.Finished || k.ChargeID != a.chargeID {
				c.Lost = append(c.Lost, LostRide{Key: key, ChargeID: a.chargeID})
			}
			keysByCharge[a.chargeID] = append(keysByCharge[a.chargeID], key)
		}
	}
	for _, charge := range slices.Sorted(maps.Keys(keysByCharge)) {
		if keys := keysByCharge[charge]; len(keys) > 1 {
			c.ChargesSharedByKeys++
			if len(c.Examples) < 10 {
				c.Examples = append(c.Examples, fmt.Sprintf("charge %s was answered to %d keys %v", charge, len(keys), keys))
			}
		}
	}

	stats, err := fakeStats(ctx, s.stripe.URL)
	if err != nil {
		return Acknowledged{}, err
	}
	c.StripeKeyMismatches = stats.IdempotencyMismatches
	return c, nil
}

// restored are the rides lost before the reconciler ran (before) that
// it brought back: not lost after it.
func restored(before, after []LostRide) []LostRide {
	var back []LostRide
	for _, l := range before {
		if !slices.ContainsFunc(after, func(a LostRide) bool { return a.Key == l.Key }) {
			back = append(back, l)
		}
	}
	return back
}

// stripeStats is the part of the fake's /_fake/stats the drill reads.
type stripeStats struct {
	IdempotencyMismatches int `json:"idempotency_mismatches"`
}

func fakeStats(ctx context.Context, fakeURL string) (stripeStats, error) {
	var st stripeStats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fakeURL+"/_fake/stats", nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, fmt.Errorf("read Stripe fake stats: %w", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("decode Stripe fake stats: %w", err)
	}
	return st, nil
}
