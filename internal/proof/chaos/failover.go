package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet"
)

// The failover drill. The soak runs against a primary and a streaming
// standby (localpg.Replicated) reached through a multi-host URL with
// target_session_attrs=read-write, and at each of its Postgres moments:
//
//  1. stalls the primary's WAL senders (SIGSTOP) for a random short
//     window, so that replication falls behind: asynchronously the
//     primary keeps acknowledging commits the standby does not have;
//     synchronously its commits wait;
//  2. SIGKILLs the primary and every process it started, while stalled;
//  3. promotes the standby;
//  4. rebuilds the dead node as the new standby (pg_basebackup), so that
//     the drill can fail over again.
//
// One api instance pauses each request between Stripe's answer and the
// phase that records the charge (the after_charge failpoint), so that the
// crash finds charges made and not yet recorded. After the drain, beyond
// the soak's invariants, checkAcknowledged looks for keys whose 2xx a
// client received and that the database no longer has, and for Stripe
// idempotency keys used for two different requests.

// afterChargePause is how long one api instance holds each charge in the
// window between Stripe and the database.
const afterChargePause = 1500 * time.Millisecond

// startDatabase starts the scratch database the soak runs against: one
// cluster, or a replicated pair with Config.Failover, and PgBouncer in
// front with Config.Pooler.
func (s *soak) startDatabase(ctx context.Context, dbName string) error {
	if s.cfg.Failover {
		ports := [2]int{}
		for i := range ports {
			port, err := fleet.FreePort()
			if err != nil {
				return err
			}
			ports[i] = port
		}
		mode := "synchronous"
		if s.cfg.AsyncReplication {
			mode = "asynchronous"
		}
		s.progress("starting a primary and a standby (%s replication) in %s", mode, s.dir)
		pair, err := localpg.NewReplicated(localpg.ReplicatedOptions{
			Dir: filepath.Join(s.dir, "replicated"), Ports: ports, Async: s.cfg.AsyncReplication,
		})
		if err != nil {
			return err
		}
		// Torn down even when Start fails half way.
		s.pair = pair
		if err := pair.Start(ctx); err != nil {
			return err
		}
		if err := pair.CreateDatabase(ctx, dbName); err != nil {
			return err
		}
		s.dbURL = pair.DatabaseURL(dbName)
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

// failover is one failover as the drill timed it.
type failover struct {
	stalled  time.Duration // how long replication was held back before the crash
	promoted time.Duration // primary killed to standby promoted
	firstOK  time.Duration // primary killed to the first 201 after the promotion
	rebuilt  time.Duration // promotion to a new standby streaming
}

// failOver runs the drill at each offset from start. A failover the pair
// does not come back from aborts the soak: a synchronous primary without
// its standby holds every commit (docs/failures.md), so the clients could
// only wait.
func (m *monkey) failOver(ctx context.Context, stop <-chan struct{}, pair *localpg.Replicated, tr *traffic, start time.Time, at []time.Duration,
	abort context.CancelCauseFunc) {
	for _, offset := range at {
		if !sleep(ctx, stop, time.Until(start.Add(offset))) {
			return
		}
		primary := pair.Primary()
		resume, err := primary.StallReplication()
		if err != nil {
			m.faults.problem("stall replication: %v", err)
			continue
		}
		stall := m.between(200*time.Millisecond, 1500*time.Millisecond)
		m.progress("replication stalled for %s, then SIGKILL the primary (port %d)", stall.Round(time.Millisecond), primary.Port)
		time.Sleep(stall)
		if err := primary.Crash(); err != nil {
			m.faults.problem("crash primary: %v", err)
		}
		killed := time.Now()
		if err := resume(); err != nil {
			m.faults.problem("%v", err)
		}
		if err := pair.Promote(ctx); err != nil {
			m.faults.problem("promote: %v", err)
			abort(fmt.Errorf("failover: the standby was not promoted: %w", err))
			return
		}
		promoted := time.Now()
		m.progress("standby promoted after %s; rebuilding a standby", promoted.Sub(killed).Round(time.Millisecond))
		if err := pair.Rebuild(ctx); err != nil {
			m.faults.problem("rebuild standby: %v", err)
			abort(fmt.Errorf("failover: the standby did not come back, and the new primary holds every commit for it: %w", err))
			return
		}
		f := failover{stalled: stall, promoted: promoted.Sub(killed), rebuilt: time.Since(promoted)}
		// The first 201 after the promotion; waited for briefly, as the
		// clients may still be backing off.
		for range 200 {
			if ok := tr.firstCreatedAfter(promoted); !ok.IsZero() {
				f.firstOK = ok.Sub(killed)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		m.progress("new standby streaming after %s; first 201 %s after the kill", f.rebuilt.Round(time.Millisecond), f.firstOK.Round(time.Millisecond))
		m.faults.count(func(fs *faults) { fs.failovers = append(fs.failovers, f) })
	}
}

// checkAcknowledged compares what the clients were told with what the
// database and Stripe hold after the drain.
func (s *soak) checkAcknowledged(ctx context.Context) error {
	s.traffic.mu.Lock()
	acked := make(map[string]ack, len(s.traffic.acknowledged))
	for k, v := range s.traffic.acknowledged {
		acked[k] = v
	}
	s.traffic.mu.Unlock()

	rows, err := s.pool.Query(ctx, `SELECT idempotency_key FROM idempotency_keys`)
	if err != nil {
		return fmt.Errorf("read idempotency keys: %w", err)
	}
	stored, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("read idempotency keys: %w", err)
	}
	inDB := make(map[string]bool, len(stored))
	for _, k := range stored {
		inDB[k] = true
	}

	c := &s.summary.Acknowledged
	keysByCharge := map[string][]string{}
	for key, a := range acked {
		c.Keys++
		if !inDB[key] {
			c.Missing++
			if len(c.Examples) < 10 {
				c.Examples = append(c.Examples, fmt.Sprintf("key %s answered %d is not in the database", key, a.status))
			}
		}
		if a.chargeID != "" {
			keysByCharge[a.chargeID] = append(keysByCharge[a.chargeID], key)
		}
	}
	for charge, keys := range keysByCharge {
		if len(keys) > 1 {
			c.ChargesSharedByKeys++
			if len(c.Examples) < 10 {
				c.Examples = append(c.Examples, fmt.Sprintf("charge %s was answered to %d keys %v", charge, len(keys), keys))
			}
		}
	}

	stats, err := fakeStats(ctx, s.stripe.URL)
	if err != nil {
		return err
	}
	c.StripeKeyMismatches = stats.IdempotencyMismatches
	return nil
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
