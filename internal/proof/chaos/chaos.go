// Package chaos is the soak: the whole of Rocket Rides as real processes
// (three api instances, two completers, two enqueuers, a worker) under a
// fleet of clients that retry like good clients, while the soak SIGKILLs
// and restarts api instances and completers, restarts Postgres and makes
// Stripe fail, stall and drop its answers after charging; with
// Config.Network the wires between the processes misbehave too (the
// network nemesis, network.go). Then the faults stop, the clients and
// completers finish what is left, the reconciler runs once, and what is
// left is judged against the design's promise
// (package invariant): one charge per ride, no charge without a ride, no
// request wedged, one receipt per paid ride, and every ride a client was
// told about still there.
//
// It runs against a Postgres cluster of its own under .data/, because it
// restarts it; cmd/chaos is its command line, and the package's test runs
// a short soak.
package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/platform/project"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet"
	"github.com/rocketrides/rocketrides/internal/testkit/invariant"
	"github.com/rocketrides/rocketrides/internal/testkit/netfault"
)

// Config configures a soak. A zero field takes the default it names; a
// negative duration or count is refused.
type Config struct {
	// Duration of the chaos phase, before the drain. Default 60s.
	Duration time.Duration
	// Clients posting rides at once. Default 16.
	Clients int
	// Seed of the random choices (which instance, which fault, when).
	// Timing still varies from run to run. Zero means a random seed.
	Seed int64
	// Keep leaves the scratch cluster running with its database, and the
	// processes' logs, for inspection.
	Keep bool
	// DrainTimeout bounds the wait, after the chaos, for every key to
	// finish and every receipt to go out. Default 2m.
	DrainTimeout time.Duration
	// Progress receives a line per event as the soak runs; nil discards.
	Progress io.Writer

	// Failover runs the soak against a Patroni cluster (etcd and two
	// nodes) and, in place of the Postgres restarts, runs Drill: the
	// failover drill (failover.go).
	Failover bool
	// Drill is the failover drill's fault: DrillLeader (the default),
	// DrillStandby or DrillAgent. Only with Failover.
	Drill string
	// Kills is how many rounds of Drill the soak runs; the chaos phase
	// lasts until they are done, if that is longer than Duration.
	// Default 3. Only with Failover.
	Kills int
	// HAPort is the first of the drill's cluster's six ports. Default:
	// a block of scratch ports of its own (localpg.HAScratchPort(3)).
	HAPort int
	// Replication is the Patroni cluster's mode: localpg.HAStrict,
	// localpg.HARelaxed, or localpg.HAAsync, which also lets the api and
	// the completer start against it (DATABASE_ALLOW_ASYNC_REPLICATION).
	// Default: the drill's, strict for DrillAgent (the project's cluster's
	// mode), relaxed for DrillLeader and DrillStandby, whose promise that
	// writes go on while a node is down only relaxed mode keeps. Only
	// with Failover.
	Replication localpg.HAMode
	// Pooler puts PgBouncer in transaction mode between Postgres and the
	// api instances and completers. The enqueuers (LISTEN) and the worker
	// (River's listener) connect directly, as they must.
	Pooler bool
	// Network puts a fault proxy on every connection between the
	// processes and to Postgres and the Stripe fake, and runs the
	// network nemesis (network.go) beside the other faults.
	Network bool
}

// The soak's settings for the processes.
const (
	stripeKey = "sk_test_chaos"
	// lockTimeout is short so that the key of a killed request is taken
	// over within seconds; it also makes a slow request lose its lock to
	// a retry now and then, which the fencing must survive.
	lockTimeout = 3 * time.Second
	// The completers work keys their clients left alone for a second
	// or two: they race the clients' retries.
	completerMinAge        = 2 * time.Second
	completerRetryInterval = time.Second
)

// Run runs a soak and returns its summary. The error is for a soak that
// could not run (no Postgres binaries, a binary that does not build, an
// interrupt); what the soak found is in the Summary.
func Run(ctx context.Context, cfg Config) (summary Summary, err error) {
	if err := cfg.validate(); err != nil {
		return Summary{}, err
	}
	if cfg.Duration == 0 {
		cfg.Duration = 60 * time.Second
	}
	if cfg.Clients == 0 {
		cfg.Clients = 16
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Int64()
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = 2 * time.Minute
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Failover {
		cfg.Drill = cmp.Or(cfg.Drill, DrillLeader)
		cfg.Kills = cmp.Or(cfg.Kills, 3)
		if cfg.Replication == "" {
			cfg.Replication = localpg.HARelaxed
			if cfg.Drill == DrillAgent {
				cfg.Replication = localpg.HAStrict
			}
		}
		if cfg.HAPort == 0 {
			if cfg.HAPort, err = localpg.HAScratchPort(3); err != nil {
				return Summary{}, err
			}
		}
	}
	// A fault the soak cannot recover from (a standby that did not come
	// back) ends it at once, with the reason, rather than leaving the
	// clients to wait on a primary that holds every commit.
	ctx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	s := &soak{cfg: cfg, start: time.Now(), traffic: newTraffic(), faults: newFaults(), abort: abort}
	s.summary = Summary{Duration: cfg.Duration, Clients: cfg.Clients, Seed: cfg.Seed,
		Failover: cfg.Failover, Drill: cfg.Drill, Replication: cfg.Replication, Pooler: cfg.Pooler, Network: cfg.Network}
	defer func() {
		s.collect()
		s.teardown()
		summary = s.summary
	}()
	if err := s.setUp(ctx); err != nil {
		return s.summary, err
	}
	s.chaos(ctx)
	if ctx.Err() != nil {
		return s.summary, fmt.Errorf("soak interrupted: %w", context.Cause(ctx))
	}
	if err := s.judge(ctx); err != nil {
		return s.summary, err
	}
	return s.summary, nil
}

// validate refuses a Config no soak can honour, naming the field. A
// negative value is refused rather than taken for the default: it is a
// mistake, not a request for one.
func (c *Config) validate() error {
	switch {
	case c.Duration < 0:
		return fmt.Errorf("chaos: Duration %s is negative", c.Duration)
	case c.Clients < 0:
		return fmt.Errorf("chaos: Clients %d is negative", c.Clients)
	case c.DrainTimeout < 0:
		return fmt.Errorf("chaos: DrainTimeout %s is negative", c.DrainTimeout)
	case c.Kills < 0:
		return fmt.Errorf("chaos: Kills %d is negative", c.Kills)
	case c.Replication != "" && !c.Failover:
		return errors.New("chaos: Replication needs the failover drill")
	case c.Replication != "" && c.Replication != localpg.HAStrict && c.Replication != localpg.HARelaxed && c.Replication != localpg.HAAsync:
		return fmt.Errorf("chaos: Replication %q: want %s, %s or %s", c.Replication, localpg.HAStrict, localpg.HARelaxed, localpg.HAAsync)
	case (c.Drill != "" || c.Kills != 0) && !c.Failover:
		return errors.New("chaos: Drill and Kills need the failover drill")
	case c.Drill != "" && c.Drill != DrillLeader && c.Drill != DrillStandby && c.Drill != DrillAgent:
		return fmt.Errorf("chaos: Drill %q: want %s, %s or %s", c.Drill, DrillLeader, DrillStandby, DrillAgent)
	case c.Pooler && c.Failover:
		// PgBouncer 1.18 takes one host per database: following a
		// failover would mean rewriting its configuration.
		return errors.New("chaos: the pooler fronts one host; run it without the failover drill")
	case c.Network && c.Failover:
		// The drill's URL names both nodes: a link would fix one.
		return errors.New("chaos: the network nemesis links each process to one database host; run it without the failover drill")
	}
	return nil
}

// soak is one run.
type soak struct {
	cfg     Config
	start   time.Time
	summary Summary
	traffic *traffic
	faults  *faults
	abort   context.CancelCauseFunc // ends the soak: see Run

	root       string
	dir        string // .data/chaos-<ts>: cluster, logs, mail
	cluster    *localpg.Cluster
	ha         *localpg.HA // with Config.Failover, in place of cluster
	pooler     *localpg.Pooler
	dbURL      string
	pooledURL  string // the api's and the completers' DATABASE_URL
	pool       *pgxpool.Pool
	fleet      *fleet.Fleet
	stripe     *fleet.Process
	apis       []*fleet.Process
	completers []*fleet.Process
	proxies    *netfault.Proxies // with Config.Network
	links      []*netfault.Link  // every process's links, for the nemesis
	token      string
	badToken   string
}

func (s *soak) progress(format string, args ...any) {
	fmt.Fprintf(s.cfg.Progress, "%7.1fs  %s\n", time.Since(s.start).Seconds(), fmt.Sprintf(format, args...))
}

// setUp starts a scratch cluster, a database, the fake, the seed and
// every process.
func (s *soak) setUp(ctx context.Context) error {
	var err error
	if s.root, err = project.Root(); err != nil {
		return err
	}
	ts := s.start.UTC().Format("20060102_150405")
	s.dir = filepath.Join(s.root, ".data", "chaos-"+ts+"-"+uuid.NewString()[:4])
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", s.dir, err)
	}
	s.summary.Dir = s.dir

	dbName := "rocketrides_chaos_" + ts
	if err := s.startDatabase(ctx, dbName); err != nil {
		return err
	}
	s.summary.DatabaseURL = s.dbURL

	s.progress("building the binaries")
	s.fleet, err = fleet.New(&fleet.Config{
		LogDir: filepath.Join(s.dir, "logs"),
		Env: []string{
			"DATABASE_URL=" + s.dbURL,
			"STRIPE_API_KEY=" + stripeKey,
			"IDEMPOTENCY_LOCK_TIMEOUT=" + lockTimeout.String(),
			// Below the lock, as every process requires, and above the
			// latency fault's 1.5 s at most.
			"STRIPE_TIMEOUT=2s",
			// A load tool: its clients send every ride with one token,
			// far past the rate limits.
			"RATE_LIMITS=off",
		},
	})
	if err != nil {
		return err
	}
	s.summary.LogDir = s.fleet.LogDir()
	if _, err := s.fleet.Run(ctx, "migrate", nil, "up"); err != nil {
		return err
	}
	if s.stripe, err = s.fleet.Start(ctx, "fakestripe"); err != nil {
		return err
	}
	s.fleet.AddEnv("STRIPE_API_BASE=" + s.stripe.URL)
	s.token, s.badToken = "chaos-"+uuid.NewString(), "chaos-bad-"+uuid.NewString()
	if _, err := s.fleet.Run(ctx, "seed", []string{"SEED_USER_TOKEN=" + s.token, "SEED_BAD_SOURCE_TOKEN=" + s.badToken}); err != nil {
		return err
	}

	// The api instances and the completers reach Postgres through the
	// pooler when there is one; with asynchronous replication they must
	// be told that the loss it risks is accepted, or they refuse to start.
	// With the network nemesis each reaches them through links of its
	// own (wire).
	if s.cfg.Network {
		s.proxies = netfault.New()
	}
	database := "postgres"
	if s.cfg.Pooler {
		database = "pgbouncer"
	}
	productEnv := func(name string) ([]string, error) {
		dbURL, err := s.wire(name, database, s.pooledURL)
		if err != nil {
			return nil, err
		}
		stripeURL, err := s.wire(name, "stripe", s.stripe.URL)
		if err != nil {
			return nil, err
		}
		env := []string{"DATABASE_URL=" + dbURL, "STRIPE_API_BASE=" + stripeURL}
		if s.cfg.Replication == localpg.HAAsync {
			env = append(env, "DATABASE_ALLOW_ASYNC_REPLICATION=true")
		}
		return env, nil
	}
	for i := range 3 {
		env, err := productEnv(fmt.Sprintf("api-%d", i+1))
		if err != nil {
			return err
		}
		if s.cfg.Failover && i == 0 {
			// One instance pauses every request between Stripe's answer
			// and the phase that records the charge, so that the
			// primary's crash finds charges in that window.
			env = append(env, "FAILPOINTS="+rides.FailAfterCharge+"=sleep:"+afterChargePause.String())
		}
		api, err := s.fleet.Start(ctx, "api", env...)
		if err != nil {
			return err
		}
		s.apis = append(s.apis, api)
	}
	if s.fleet.Has("completer") {
		for i := range 2 {
			env, err := productEnv(fmt.Sprintf("completer-%d", i+1))
			if err != nil {
				return err
			}
			p, err := s.fleet.Start(ctx, "completer", append(env,
				"COMPLETER_MIN_AGE="+completerMinAge.String(),
				"COMPLETER_RETRY_INTERVAL="+completerRetryInterval.String(),
				"COMPLETER_POLL_INTERVAL=500ms")...)
			if err != nil {
				return err
			}
			s.completers = append(s.completers, p)
		}
	} else {
		s.progress("no cmd/completer: keys the clients give up on stay unfinished")
	}
	for i := range 2 {
		dbURL, err := s.wire(fmt.Sprintf("enqueuer-%d", i+1), "postgres", s.dbURL)
		if err != nil {
			return err
		}
		if _, err := s.fleet.Start(ctx, "enqueuer", "DATABASE_URL="+dbURL); err != nil {
			return err
		}
	}
	// A failover leaves jobs running whose worker lost the database:
	// rescued within seconds here, so that the drain sees them through.
	workerURL, err := s.wire("worker", "postgres", s.dbURL)
	if err != nil {
		return err
	}
	if _, err := s.fleet.Start(ctx, "worker", "DATABASE_URL="+workerURL, "MAIL_DIR="+filepath.Join(s.dir, "mail"),
		"WORKER_JOB_TIMEOUT=5s", "WORKER_RESCUE_STUCK_AFTER=10s"); err != nil {
		return err
	}

	cfg, err := pgxpool.ParseConfig(s.dbURL)
	if err != nil {
		return fmt.Errorf("parse database url: %w", err)
	}
	cfg.MaxConns = 4
	// The soak restarts Postgres under this pool too.
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return true }
	if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return fmt.Errorf("open database pool: %w", err)
	}
	s.progress("running: 3 api, %d completers, 2 enqueuers, 1 worker, %d clients, seed %d%s",
		len(s.completers), s.cfg.Clients, s.cfg.Seed, s.summary.mode())
	return nil
}

// chaos runs the clients and the monkeys for the duration, then stops the
// faults and lets the clients finish the keys in hand.
func (s *soak) chaos(ctx context.Context) {
	apis := make([]string, len(s.apis))
	for i, p := range s.apis {
		apis[i] = p.URL
	}
	httpClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: s.cfg.Clients}}
	stopClients := make(chan struct{})
	var clients sync.WaitGroup
	for i := range s.cfg.Clients {
		r := &rider{
			http: httpClient, apis: apis, token: s.token, badToken: s.badToken,
			rng:     rand.New(rand.NewPCG(uint64(s.cfg.Seed), uint64(i+1))),
			traffic: s.traffic,
		}
		clients.Go(func() { r.run(ctx, stopClients) })
	}

	stopChaos := make(chan struct{})
	var monkeys sync.WaitGroup
	newMonkey := func(stream uint64) *monkey {
		return &monkey{rng: rand.New(rand.NewPCG(uint64(s.cfg.Seed), 1000+stream)), faults: s.faults, progress: s.progress}
	}
	monkeys.Go(func() {
		newMonkey(1).killProcesses(ctx, stopChaos, s.apis, 2*time.Second, 5*time.Second,
			func(f *faults) { f.apiKills++ })
	})
	if len(s.completers) > 0 {
		monkeys.Go(func() {
			newMonkey(2).killProcesses(ctx, stopChaos, s.completers, 6*time.Second, 12*time.Second,
				func(f *faults) { f.completerKills++ })
		})
	}
	// Mid-run, and once more late in a long soak.
	restarts := []time.Duration{s.cfg.Duration * 2 / 5}
	if s.cfg.Duration >= 45*time.Second {
		restarts = append(restarts, s.cfg.Duration*3/4)
	}
	drilled := make(chan struct{})
	if s.cfg.Failover {
		monkeys.Go(func() {
			defer close(drilled)
			m := newMonkey(3)
			m.mode = s.cfg.Replication
			m.drill(ctx, s.cfg, s.ha, s.traffic, s.abort)
		})
		monkeys.Go(func() { monitorSync(ctx, stopChaos, s.ha, s.faults) })
		monkeys.Go(func() { monitorReadyz(ctx, stopChaos, apis, newMonkey(4).rng, s.faults) })
	} else {
		close(drilled)
		monkeys.Go(func() { newMonkey(3).restartPostgres(ctx, stopChaos, *s.cluster, time.Now(), restarts) })
	}
	monkeys.Go(func() {
		newMonkey(4).injectStripeFaults(ctx, stopChaos, s.stripe.URL, 1500*time.Millisecond, 4*time.Second)
	})
	networked := make(chan struct{})
	if s.cfg.Network {
		monkeys.Go(func() {
			newMonkey(5).injectNetworkFaults(ctx, stopChaos, s.links, 400*time.Millisecond, 1600*time.Millisecond, networked)
		})
	} else {
		close(networked)
	}

	sleep(ctx, nil, s.cfg.Duration)
	// The drill's rounds are not cut short, nor the network nemesis's
	// first: the faults go on until they are done.
	for _, done := range []chan struct{}{drilled, networked} {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	close(stopChaos)
	monkeys.Wait()
	if err := setFaults(context.WithoutCancel(ctx), s.stripe.URL, nil); err != nil {
		s.faults.problem("clear Stripe faults: %v", err)
	}
	s.progress("chaos over; clients finish the keys in hand")
	close(stopClients)
	done := make(chan struct{})
	go func() { clients.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.cfg.DrainTimeout):
		s.faults.problem("clients still retrying after %s", s.cfg.DrainTimeout)
	}
}

// judge waits for the completers and the receipt pipeline to drain and
// checks the invariants and what the clients were told; then it runs the
// reconciler, which may restore rides the database lost, waits for the
// receipts of what it restored, and checks again. The soak is judged on
// the second check: what is left once the reconciler has done its work.
func (s *soak) judge(ctx context.Context) error {
	s.progress("draining: waiting for unfinished keys and pending receipt jobs")
	if err := s.drain(ctx); err != nil {
		s.faults.problem("%v", err)
	}
	var err error
	if s.summary.ReportBefore, s.summary.AcknowledgedBefore, err = s.check(ctx); err != nil {
		return err
	}
	s.summary.Report, s.summary.Acknowledged = s.summary.ReportBefore, s.summary.AcknowledgedBefore
	if s.fleet.Has("reconciler") {
		s.reconcile(ctx)
		s.progress("reconciler: %s; draining again", s.summary.Reconciler)
		if err := s.drain(ctx); err != nil {
			s.faults.problem("after the reconciler: %v", err)
		}
		if s.summary.Report, s.summary.Acknowledged, err = s.check(ctx); err != nil {
			return err
		}
		s.summary.Acknowledged.Restored = restored(s.summary.AcknowledgedBefore.Lost, s.summary.Acknowledged.Lost)
	}
	if s.cfg.Drill == DrillAgent {
		if s.summary.ReceiptsMailed, err = s.receiptsMailed(ctx, s.summary.Report); err != nil {
			return err
		}
	}
	s.summary.Judged = true
	return nil
}

// check runs the invariant check and compares what the clients were told
// with what the database holds.
func (s *soak) check(ctx context.Context) (invariant.Report, Acknowledged, error) {
	report, err := invariant.Check(ctx, s.pool, invariant.NewStripeClient(s.stripe.URL, stripeKey),
		invariant.Options{ReceiptsDrained: true, LockTimeout: lockTimeout})
	if err != nil {
		return invariant.Report{}, Acknowledged{}, err
	}
	acked, err := s.checkAcknowledged(ctx)
	if err != nil {
		return invariant.Report{}, Acknowledged{}, err
	}
	return report, acked, nil
}

// reconcile runs cmd/reconciler -once: it reports what Stripe and the
// rides table disagree on, and restores the rides the database lost
// whose charges say what they were. Its exit status 1 is a finding, not
// a failure: what it leaves behind is for the check after it to judge.
func (s *soak) reconcile(ctx context.Context) {
	// RECONCILER_GRACE: the soak is drained, so nothing may still be in
	// flight; 1ms because zero is refused.
	out, err := s.fleet.Run(ctx, "reconciler", []string{"RECONCILER_GRACE=1ms", "RECONCILER_WINDOW=24h"}, "-once")
	s.summary.Reconciler = firstLine(out)
	s.summary.ReconcilerLines = strings.Split(strings.TrimSpace(out), "\n")
	// Exit status 1 is a finding, reported in the lines; anything else is
	// a reconciler that could not compare.
	var exit *exec.ExitError
	found := errors.As(err, &exit) && exit.ExitCode() == 1
	if err != nil && !found {
		s.summary.ReconcilerFailed = true
		s.summary.Reconciler = fmt.Sprintf("%s (%v)", firstLine(out), firstLine(err.Error()))
	}
}

// drain waits until no key is unfinished (other than those set aside for
// a human, which the check reports) and no receipt job is pending.
func (s *soak) drain(ctx context.Context) error {
	deadline := time.Now().Add(s.cfg.DrainTimeout)
	var unfinished, pending int
	for {
		err := s.pool.QueryRow(ctx, `
			SELECT (SELECT count(*) FROM idempotency_keys
			        WHERE recovery_point <> 'finished' AND attention_reason IS NULL),
			       (SELECT count(*) FROM staged_jobs)
			     + (SELECT count(*) FROM river_job
			        WHERE state NOT IN ('completed', 'discarded', 'cancelled'))`).Scan(&unfinished, &pending)
		if err == nil && unfinished == 0 && pending == 0 {
			s.progress("drained")
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not drained after %s: %d keys unfinished, %d receipt jobs pending (last error: %v)",
				s.cfg.DrainTimeout, unfinished, pending, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// collect copies the counters into the summary.
func (s *soak) collect() {
	s.traffic.mu.Lock()
	s.summary.Requests = s.traffic.requests
	s.summary.Answers = s.traffic.answers
	s.summary.Keys = s.traffic.keys
	s.summary.KeyOutcomes = s.traffic.final
	s.summary.KeysGivenUp = s.traffic.abandoned
	s.summary.OddAnswers = s.traffic.odd
	s.traffic.mu.Unlock()

	s.faults.mu.Lock()
	s.summary.APIKills = s.faults.apiKills
	s.summary.CompleterKills = s.faults.completerKills
	s.summary.PostgresRestarts = s.faults.pgRestarts
	s.summary.Rounds = s.faults.rounds
	s.summary.Degraded = s.faults.degraded
	s.summary.ReadyzAlone = s.faults.readyzAlone
	s.summary.ReadyzConfirmed = s.faults.readyzConfirmed
	s.summary.ReadyzWaiting = s.faults.readyzWaiting
	s.summary.ReadyzOther = s.faults.readyzOther
	s.summary.StripeFaults = s.faults.stripe
	s.summary.StripeFaultRequests = s.faults.stripeRequests
	s.summary.NetworkFaults = s.faults.network
	s.summary.NetworkFaultLinks = s.faults.networkLinks
	s.summary.Problems = s.faults.problems
	s.faults.mu.Unlock()
}

// teardown stops everything and, unless Keep, deletes the scratch data.
func (s *soak) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if s.pool != nil {
		s.pool.Close()
	}
	var errs []error
	if s.fleet != nil {
		errs = append(errs, s.fleet.Stop(ctx))
	}
	if s.proxies != nil {
		s.proxies.Close()
	}
	if s.pooler != nil {
		errs = append(errs, s.pooler.Stop(ctx))
	}
	if s.cluster != nil && !s.cfg.Keep {
		errs = append(errs, s.cluster.Stop(ctx))
	}
	if s.ha != nil && !s.cfg.Keep {
		errs = append(errs, s.ha.Stop(ctx))
	}
	if s.dir != "" && !s.cfg.Keep {
		errs = append(errs, os.RemoveAll(s.dir))
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(s.cfg.Progress, "teardown: %v\n", err)
	}
	if s.cfg.Keep && s.cluster != nil {
		s.summary.KeptClusters = []localpg.Cluster{*s.cluster}
	}
	if s.cfg.Keep && s.ha != nil {
		s.summary.KeptHA = s.ha.Dir
	}
}

func firstLine(s string) string {
	for i, r := range s {
		if r == '\n' {
			return s[:i]
		}
	}
	return s
}
