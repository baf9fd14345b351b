// Package bench measures Rocket Rides against the physical ceiling of its
// own database work. One run starts a scratch Postgres cluster (fsync on,
// as always), builds every command, and measures in turn:
//
//   - limit: pgbench running one ride's statements (ride.sql) and nothing
//     else, on a freshly migrated database: the rides/s no api can beat;
//   - new, instances, replay, hiding: the api and the Stripe fake as real
//     processes, driven by an in-process HTTP load generator;
//   - scale: the same with millions of finished keys in idempotency_keys;
//   - enqueuer, completer, reaper: the background processes' drain rates,
//     and what the reaper does to the api's latency;
//   - partition: reaping by DELETE against dropping a partition.
//
// Every api figure is reported as a ratio to the pgbench limit or to the
// figure it should match, next to the target it is held to.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/user"
)

// Steps are the run's steps in the order they run; Config.Only picks
// some of them.
var Steps = []string{"limit", "new", "instances", "replay", "hiding", "scale", "enqueuer", "completer", "partition", "reaper"}

// DefaultPort is the bench cluster's port, next to the project cluster's
// 54329 so that both can run at once.
const DefaultPort = 54339

// Config configures a run.
type Config struct {
	// Root is the project root (go.mod). DataDir defaults to
	// Root/.data/bench.
	Root    string
	DataDir string
	// Port is the cluster's port on 127.0.0.1.
	Port int
	// Quick shortens every step and loads 100k keys instead of 5M: a
	// smoke run.
	Quick bool
	// Only runs just these steps (see Steps); empty runs them all.
	Only []string
	// Keep leaves the cluster running afterwards, for poking at.
	Keep bool
	// Variants also measures candidate optimisations of the ride's SQL
	// with pgbench (ride_2commits.sql, replay*.sql): a minute and a half
	// more.
	Variants bool
	// Log receives progress lines.
	Log io.Writer
	// Command is how the run was started, for the report.
	Command string
}

// sizes are a run's durations and row counts.
type sizes struct {
	warmup, step time.Duration
	// short is the measured time of the steps whose figures are not
	// held to a target (pgbench and the api at 1 and 8 clients).
	short          time.Duration
	pgbenchClients []int
	newClients     []int
	scaleKeys      int64
	expiredKeys    int64
	stagedJobs     int64
	completerKeys  int64
	partitionKeys  int64
	// backgroundCap bounds each background step, and reaperCap the
	// reaper, so that a slow one reports a partial rate instead of blowing
	// the run's time budget. Both shrink further when the run as a whole
	// is late (see capFor).
	backgroundCap, reaperCap time.Duration
	// budget is how long the whole run may take.
	budget time.Duration
}

func sizesFor(quick bool) sizes {
	if quick {
		return sizes{
			warmup: 500 * time.Millisecond, step: 2 * time.Second, short: time.Second,
			pgbenchClients: []int{1, 8, 32},
			newClients:     []int{1, 8, 32, 128},
			scaleKeys:      100_000, expiredKeys: 20_000,
			stagedJobs: 10_000, completerKeys: 1_000, partitionKeys: 20_000,
			backgroundCap: 30 * time.Second, reaperCap: 30 * time.Second, budget: 5 * time.Minute,
		}
	}
	return sizes{
		warmup: 2 * time.Second, step: 10 * time.Second, short: 5 * time.Second,
		pgbenchClients: []int{1, 4, 8, 32},
		newClients:     []int{1, 8, 32, 128},
		scaleKeys:      5_000_000, expiredKeys: 1_000_000,
		stagedJobs: 100_000, completerKeys: 10_000, partitionKeys: 1_000_000,
		backgroundCap: 40 * time.Second, reaperCap: 80 * time.Second, budget: 9*time.Minute + 30*time.Second,
	}
}

// The ride every request asks for. Canonical params are what the api
// stores on the key; generated keys carry the same, so that replaying
// them is the same request.
var (
	rideParams = rides.Params{OriginLat: 37.7749, OriginLon: -122.4194, TargetLat: 37.8044, TargetLon: -122.2712}
	rideBody   = []byte(`{"origin_lat": 37.7749, "origin_lon": -122.4194, "target_lat": 37.8044, "target_lon": -122.2712}`)
)

// The seeded user's API token (cmd/seed's default).
const seedToken = "rr_dev_token_user_0123456789"

type run struct {
	cfg    Config
	sz     sizes
	only   map[string]bool
	report *Report
	start  time.Time
	runID  string

	cluster localpg.Cluster
	binDir  string
	logDir  string
	built   map[string]bool
	procs   []*proc
	db      *pgxpool.Pool // the api's database, for the bench's own SQL

	fake      *proc
	fakeURL   string
	apis      []*proc
	apiURLs   []string
	debugAddr string
	userID    int64
	others    []int64

	finishedMu sync.Mutex
	finished   []string // keys of finished rides, for replays

	// Figures the targets and ratios need.
	limit       map[int]float64
	newRides    map[int]LoadResult
	replays     *LoadResult
	hiding      *LoadResult
	scaleNew    *LoadResult
	scaleReplay *LoadResult
	reaperBase  *LoadResult
	reaperLoad  *LoadResult
	peakRSS     int64
	variantBase float64
	scaleLoaded bool
	expiredDone bool
}

// Run runs the bench and returns its report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.DataDir == "" {
		cfg.DataDir = filepath.Join(cfg.Root, ".data", "bench")
	}
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	only := map[string]bool{}
	for _, s := range cfg.Only {
		if !slices.Contains(Steps, s) {
			return nil, fmt.Errorf("unknown step %q (steps: %s)", s, strings.Join(Steps, ", "))
		}
		only[s] = true
	}
	idBytes := make([]byte, 4)
	_, _ = rand.Read(idBytes)
	r := &run{
		cfg: cfg, sz: sizesFor(cfg.Quick), only: only, start: time.Now(), runID: hex.EncodeToString(idBytes),
		limit: map[int]float64{}, newRides: map[int]LoadResult{},
		report: &Report{Command: cfg.Command, Started: time.Now().UTC(), Quick: cfg.Quick},
	}
	r.report.Machine = Machine{
		CPUs: runtime.NumCPU(), MemoryGiB: memoryGiB(), LoadAverageStart: loadAverage(),
		// pgxpool's default, which the api keeps when DATABASE_MAX_CONNS
		// is unset.
		APIPoolSize: max(4, runtime.NumCPU()),
	}
	release, err := lockRun(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	defer release()
	defer r.teardown()
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"limit", r.stepLimit},
		{"variants", r.stepVariants},
		{"new", r.stepNew},
		{"instances", r.stepInstances},
		{"replay", r.stepReplay},
		{"hiding", r.stepHiding},
		{"scale", r.stepScale},
		{"enqueuer", r.stepEnqueuer},
		{"completer", r.stepCompleter},
		{"partition", r.stepPartition},
		{"reaper", r.stepReaper},
	}
	for _, s := range steps {
		if s.name == "variants" && !cfg.Variants || s.name != "variants" && !r.selected(s.name) {
			continue
		}
		r.logf("step %s", s.name)
		if err := s.fn(ctx); err != nil {
			return r.report, fmt.Errorf("step %s: %w", s.name, err)
		}
	}
	r.tableStats(ctx)
	r.targets()
	r.report.Machine.LoadAverageEnd = loadAverage()
	r.report.Seconds = time.Since(r.start).Round(time.Second).Seconds()
	return r.report, nil
}

func (r *run) selected(step string) bool { return len(r.only) == 0 || r.only[step] }

// capFor bounds a step that can be cut short: want, or less when the run
// would otherwise overrun its budget, keeping reserve for the steps that
// follow. A busy shared machine slows every step; this keeps the whole
// run inside its budget anyway.
func (r *run) capFor(want, reserve time.Duration) time.Duration {
	left := r.sz.budget - time.Since(r.start) - reserve
	return max(min(want, left), 5*time.Second)
}

func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(r.cfg.Log, "[%6.1fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

func (r *run) add(f Figure) {
	f.LoadAverage = strings.Fields(loadAverage())[0]
	r.report.Figures = append(r.report.Figures, f)
	line := fmt.Sprintf("%s / %s: %s %s", f.Step, f.Name, formatFloat(f.Value), f.Unit)
	if f.P50Ms > 0 {
		line += fmt.Sprintf(", p50 %s ms, p99 %s ms", formatFloat(f.P50Ms), formatFloat(f.P99Ms))
	}
	if f.Errors > 0 {
		line += fmt.Sprintf(", %d errors", f.Errors)
	}
	if f.Note != "" {
		line += " (" + f.Note + ")"
	}
	r.logf("  %s", line)
}

// setup builds the commands, starts the cluster, migrates the api's
// database, and starts the Stripe fake and the api.
func (r *run) setup(ctx context.Context) error {
	r.binDir = filepath.Join(r.cfg.DataDir, "bin")
	r.logDir = filepath.Join(r.cfg.DataDir, "logs")
	if err := os.MkdirAll(r.logDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", r.logDir, err)
	}
	r.logf("building commands into %s", r.binDir)
	built, err := build(ctx, r.cfg.Root, r.binDir, r.logf)
	if err != nil {
		return err
	}
	r.built = built

	r.logf("starting the bench cluster in %s on port %d", filepath.Join(r.cfg.DataDir, "postgres"), r.cfg.Port)
	r.cluster, err = startCluster(ctx, filepath.Join(r.cfg.DataDir, "postgres"), r.cfg.Port)
	if err != nil {
		return err
	}
	if err := r.migrate(ctx, apiDB); err != nil {
		return err
	}
	r.db, err = pgxpool.New(ctx, r.benchURL(apiDB)+"&pool_max_conns=4")
	if err != nil {
		return fmt.Errorf("open %s: %w", apiDB, err)
	}
	if err := r.db.QueryRow(ctx, `SELECT version()`).Scan(&r.report.Machine.Postgres); err != nil {
		return fmt.Errorf("read server version: %w", err)
	}
	if i := strings.Index(r.report.Machine.Postgres, " on "); i > 0 {
		r.report.Machine.Postgres = r.report.Machine.Postgres[:i]
	}
	var settings []string
	for _, name := range []string{"fsync", "synchronous_commit", "full_page_writes", "wal_level", "shared_buffers", "max_wal_size"} {
		var v string
		if err := r.db.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			return fmt.Errorf("read setting %s: %w", name, err)
		}
		settings = append(settings, name+"="+v)
	}
	r.report.Machine.Settings = strings.Join(settings, " ")
	r.logf("  %s; %s", r.report.Machine.Postgres, r.report.Machine.Settings)

	if err := r.startFake(ctx); err != nil {
		return err
	}
	if err := r.seed(ctx); err != nil {
		return err
	}
	_, err = r.startAPI(ctx, true)
	return err
}

func (r *run) teardown() {
	for i := len(r.procs) - 1; i >= 0; i-- {
		r.procs[i].stop()
	}
	if r.db != nil {
		r.db.Close()
	}
	if r.cluster.DataDir != "" && !r.cfg.Keep {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := r.cluster.Stop(ctx); err != nil {
			r.logf("stop the bench cluster: %v", err)
		}
	}
}

// benchApp is the application_name of the bench's own connections, which
// the wait-event sampler leaves out.
const benchApp = "rocketrides-bench"

// benchURL is the URL of db for the bench's own connections.
func (r *run) benchURL(db string) string {
	return r.cluster.DatabaseURL(db) + "&application_name=" + benchApp
}

func (r *run) bin(name string) string { return filepath.Join(r.binDir, name) }

func (r *run) migrate(ctx context.Context, db string) error {
	if _, err := runTool(ctx, r.bin("migrate"), []string{"DATABASE_URL=" + r.cluster.DatabaseURL(db)}, "up"); err != nil {
		return fmt.Errorf("migrate %s: %w", db, err)
	}
	return nil
}

func (r *run) startFake(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	p, err := startProc(r.logDir, "fakestripe", r.bin("fakestripe"), []string{fmt.Sprintf("PORT=%d", port)})
	if err != nil {
		return err
	}
	r.procs = append(r.procs, p)
	r.fake, r.fakeURL = p, fmt.Sprintf("http://127.0.0.1:%d", port)
	return waitHTTP(ctx, p, r.fakeURL+"/_fake/faults")
}

// seed creates the demo users with cmd/seed (their Stripe customers live
// in this run's fake) and two more users who own some of the generated
// keys.
func (r *run) seed(ctx context.Context) error {
	if _, err := runTool(ctx, r.bin("seed"), r.stripeEnv(apiDB)); err != nil {
		return err
	}
	if err := r.db.QueryRow(ctx, `SELECT id FROM users WHERE email = 'user@example.com'`).Scan(&r.userID); err != nil {
		return fmt.Errorf("find the seeded user: %w", err)
	}
	for i := range 2 {
		var id int64
		if err := r.db.QueryRow(ctx, `
			INSERT INTO users (email, stripe_customer_id, api_token_hash)
			VALUES ($1, $2, $3)
			RETURNING id`,
			fmt.Sprintf("bench-other-%d@example.com", i), fmt.Sprintf("cus_bench_other_%d", i),
			user.HashToken(fmt.Sprintf("rr_bench_token_other_%d_0123456789", i)),
		).Scan(&id); err != nil {
			return fmt.Errorf("create user: %w", err)
		}
		r.others = append(r.others, id)
	}
	return nil
}

// stripeEnv is what every process that talks to the database and to
// Stripe needs.
func (r *run) stripeEnv(db string) []string {
	return []string{
		"DATABASE_URL=" + r.cluster.DatabaseURL(db),
		"STRIPE_API_KEY=" + stripeKey,
		"STRIPE_API_BASE=" + r.fakeURL,
	}
}

// startAPI starts an api process on a free port. The first one gets a
// pprof listener (DEBUG_ADDR), for builds of the api that offer one.
func (r *run) startAPI(ctx context.Context, first bool, extraEnv ...string) (*proc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	env := append(append(r.stripeEnv(apiDB), fmt.Sprintf("PORT=%d", port)), extraEnv...)
	name := fmt.Sprintf("api-%d", len(r.apis)+1)
	if first {
		debugPort, err := freePort()
		if err != nil {
			return nil, err
		}
		r.debugAddr = fmt.Sprintf("127.0.0.1:%d", debugPort)
		env = append(env, "DEBUG_ADDR="+r.debugAddr)
	}
	p, err := startProc(r.logDir, name, r.bin("api"), env)
	if err != nil {
		return nil, err
	}
	r.procs = append(r.procs, p)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := waitHTTP(ctx, p, url+"/readyz"); err != nil {
		return nil, err
	}
	r.apis = append(r.apis, p)
	r.apiURLs = append(r.apiURLs, url)
	return p, nil
}

// targets holds the figures to the goals the project set itself.
func (r *run) targets() {
	add := func(name, want, got string, met *bool) {
		r.report.Targets = append(r.report.Targets, Target{Name: name, Want: want, Got: got, Met: met})
	}
	is := func(b bool) *bool { return &b }
	new32, haveNew := r.newRides[32]

	if l, at := r.ceiling(); haveNew && l > 0 {
		ratio := new32.Rate / l
		got := fmt.Sprintf("%.0f / %.0f (best pgbench, %d clients) = %.2f", new32.Rate, l, at, ratio)
		if l32 := r.limit[32]; l32 > 0 && at != 32 {
			got += fmt.Sprintf("; vs pgbench at 32 clients %.0f: %.2f", l32, new32.Rate/l32)
		}
		add("new rides/s at 32 clients vs pgbench limit", ">= 0.60 x limit", got, is(ratio >= 0.6))
	} else {
		add("new rides/s at 32 clients vs pgbench limit", ">= 0.60 x limit", "", nil)
	}
	if haveNew && new32.Latency.P50 > 0 {
		ratio := float64(new32.Latency.P99) / float64(new32.Latency.P50)
		add("p99 / p50 of new rides at 32 clients", "<= 5", fmt.Sprintf("%.1f / %.1f ms = %.1f",
			ms(new32.Latency.P99), ms(new32.Latency.P50), ratio), is(ratio <= 5))
	} else {
		add("p99 / p50 of new rides at 32 clients", "<= 5", "", nil)
	}
	if r.hiding != nil {
		ratio := r.hiding.Rate / 512
		add("latency hiding: 128 clients, Stripe 250 ms", ">= 0.80 x 512/s",
			fmt.Sprintf("%.0f / 512 = %.2f", r.hiding.Rate, ratio), is(ratio >= 0.8))
	} else {
		add("latency hiding: 128 clients, Stripe 250 ms", ">= 0.80 x 512/s", "", nil)
	}
	if r.replays != nil && haveNew && new32.Rate > 0 {
		ratio := r.replays.Rate / new32.Rate
		add("replays/s vs new rides/s at 32 clients", ">= 5 x", fmt.Sprintf("%.0f / %.0f = %.1f",
			r.replays.Rate, new32.Rate, ratio), is(ratio >= 5))
	} else {
		add("replays/s vs new rides/s at 32 clients", ">= 5 x", "", nil)
	}
	scale := func(name string, big, small *LoadResult) {
		if big == nil || small == nil || small.Rate == 0 {
			add(name, ">= 0.90 x empty table", "", nil)
			return
		}
		ratio := big.Rate / small.Rate
		add(name, ">= 0.90 x empty table", fmt.Sprintf("%.0f / %.0f = %.2f", big.Rate, small.Rate, ratio), is(ratio >= 0.9))
	}
	var small *LoadResult
	if haveNew {
		small = &new32
	}
	scale("scale: new rides/s with the keys loaded", r.scaleNew, small)
	scale("scale: replays/s with the keys loaded", r.scaleReplay, r.replays)
	if r.reaperBase != nil && r.reaperLoad != nil && r.reaperBase.Latency.P99 > 0 {
		ratio := float64(r.reaperLoad.Latency.P99) / float64(r.reaperBase.Latency.P99)
		add("api p99 while the reaper runs vs before", "<= 1.25 x", fmt.Sprintf("%.1f / %.1f ms = %.2f",
			ms(r.reaperLoad.Latency.P99), ms(r.reaperBase.Latency.P99), ratio), is(ratio <= 1.25))
	} else {
		add("api p99 while the reaper runs vs before", "<= 1.25 x", "", nil)
	}
	if r.peakRSS > 0 {
		mib := float64(r.peakRSS) / (1 << 20)
		add("api peak RSS (VmHWM) through 128 clients", "<= 64 MiB", fmt.Sprintf("%.1f MiB", mib), is(mib <= 64))
	} else {
		add("api peak RSS (VmHWM) through 128 clients", "<= 64 MiB", "", nil)
	}
}
