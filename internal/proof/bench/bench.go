// Package bench measures Rocket Rides against the ceiling of its own
// database work, on a scratch Postgres cluster (fsync on, as always). The
// limit is pgbench replaying one ride's statements, captured from real
// rides through the api's own handler (capture.go), round trip for round
// trip; the api and the Stripe fake then run as real processes (package
// fleet) under an in-process load, on an empty table and on millions of
// keys, and the background processes drain their backlogs. Each figure is
// reported as a ratio to what it should match, beside the target it is
// held to; docs/scaling.md explains them and keeps the findings of
// experiments the bench no longer runs.
package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet"
	"github.com/rocketrides/rocketrides/internal/user"
)

// Steps are the run's steps in the order they run.
var Steps = []string{"limit", "new", "plain", "instances", "pooler", "replay", "ratelimits", "tracing", "hiding", "scale", "enqueuer", "completer", "reaper"}

// Config configures a run.
type Config struct {
	Root    string    // the project root; DataDir defaults to Root/.data/bench
	DataDir string    // the cluster, the logs, the pgbench scripts
	Port    int       // the cluster's port on 127.0.0.1; 0 is LOCALPG_PORT+10 (localpg.PortAbove)
	Quick   bool      // short steps and 100k keys instead of 5M: a smoke run
	Only    []string  // run just these of Steps
	Keep    bool      // leave the cluster running afterwards
	Profile string    // if set, a CPU profile of the api over new rides at 32 clients goes to this file
	JSON    string    // if set, the file the caller writes the report to (Report.WriteJSON); Run checks it first
	Log     io.Writer // progress lines
	Command string    // how the run was started, for the report
	// RateLimits runs the api with every rate limit on, each too high to
	// be reached: what counting costs. Without it the api runs with
	// RATE_LIMITS=off, as a load tool must (one token sends every ride).
	RateLimits bool
}

// sizes are a run's durations and row counts. short is the measured time
// of the steps not held to a target; backgroundCap bounds each background
// step and reaperCap the reaper, so that a slow one reports a partial rate
// instead of overrunning the budget (see capFor).
type sizes struct {
	warmup, step, short, backgroundCap, reaperCap, budget time.Duration
	pgbenchClients, newClients                            []int
	scaleKeys, expiredKeys, stagedJobs, completerKeys     int64
}

func sizesFor(quick bool) sizes {
	if quick {
		return sizes{500 * time.Millisecond, 2 * time.Second, time.Second, 30 * time.Second, 30 * time.Second, 5 * time.Minute,
			[]int{1, 8, 32}, []int{1, 8, 32, 128}, 100_000, 20_000, 10_000, 1_000}
	}
	return sizes{2 * time.Second, 10 * time.Second, 5 * time.Second, 40 * time.Second, 80 * time.Second, 570 * time.Second,
		[]int{1, 4, 8, 32}, []int{1, 8, 32, 128}, 5_000_000, 1_000_000, 100_000, 10_000}
}

// The databases a run creates afresh: the captured rides' (on each of the
// key store's paths), pgbench's, and the api's, which the scale and
// background steps use too.
const captureDB, capturePlainDB, limitDB, apiDB = "bench_capture", "bench_capture_plain", "bench_limit", "bench_api"

// stripeKey is any test key: the fake accepts every sk_test_ key.
const stripeKey = "sk_test_rocketrides_bench"

// The ride every request asks for, as the seeded user (cmd/seed's token).
var rideBody = []byte(`{"origin_lat": 37.7749, "origin_lon": -122.4194, "target_lat": 37.8044, "target_lon": -122.2712}`)

const seedToken = "rr_dev_token_user_0123456789"

type run struct {
	cfg    Config
	sz     sizes
	report *Report
	start  time.Time
	runID  string

	cluster localpg.Cluster
	fleet   *fleet.Fleet
	db      *pgxpool.Pool // the api's database, for the bench's own SQL
	capture *capture
	fake    *fleet.Process
	apis    []*fleet.Process
	userID  int64
	otherID int64 // the seeded user whose card is declined, who owns some generated keys

	// Figures the targets and ratios need; the api is held to the best
	// pgbench rate at any client count (bestAt), not to pgbench at its own
	// client count, which may have fared worse.
	bestAt                                                         int
	limit                                                          map[int]float64
	limitNear                                                      float64         // pgbench at bestAt again, just before the new rides at 32 clients
	limitUID                                                       int64           // the capture's user in limitDB
	minimalAt                                                      int             // the minimal design's best client count
	minimal                                                        map[int]float64 // its rates (cost.go)
	newRides                                                       map[int]LoadResult
	replays, hiding, scaleNew, scaleReplay, reaperBase, reaperLoad LoadResult
	peakRSS                                                        int64
	apiCPU                                                         time.Duration // per new ride at 32 clients
	floorCPU, minimalAPICPU                                        time.Duration // the same for floor.go's and minimal.go's servers
	rateLimitsCost                                                 float64       // new rides/s with the limits on over off
	debugAddr                                                      string        // the first api's pprof listener, with Config.Profile
	expiredDone                                                    bool
}

// Run runs the bench and returns its report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	for _, s := range cfg.Only {
		if !slices.Contains(Steps, s) {
			return nil, fmt.Errorf("unknown step %q (steps: %s)", s, strings.Join(Steps, ", "))
		}
	}
	// A profile asked for is a profile the run can write, known before
	// the minutes of the steps before it. Nothing is written to its path
	// until the profile is taken: a file already there stays as it is
	// should the run stop before.
	if cfg.Profile != "" {
		if len(cfg.Only) > 0 && !slices.Contains(cfg.Only, "new") {
			return nil, errors.New("-profile profiles the api over the new step, which -only leaves out")
		}
		if err := canWrite(cfg.Profile); err != nil {
			return nil, fmt.Errorf("-profile: %w", err)
		}
	}
	// Likewise the report's JSON, written once the run is over.
	if cfg.JSON != "" {
		if err := canWrite(cfg.JSON); err != nil {
			return nil, fmt.Errorf("-json: %w", err)
		}
	}
	cfg.DataDir = cmp.Or(cfg.DataDir, filepath.Join(cfg.Root, ".data", "bench"))
	if cfg.Port == 0 {
		port, err := localpg.PortAbove(10)
		if err != nil {
			return nil, err
		}
		cfg.Port = port
	}
	cfg.Log = cmp.Or(cfg.Log, io.Discard)
	r := &run{cfg: cfg, sz: sizesFor(cfg.Quick), start: time.Now(), runID: strings.ToLower(rand.Text()[:8]),
		limit: map[int]float64{}, minimal: map[int]float64{}, newRides: map[int]LoadResult{},
		report: &Report{Command: cfg.Command, Started: time.Now().UTC(), Quick: cfg.Quick, RateLimits: rateLimitsNote(cfg.RateLimits), Machine: Machine{
			CPUs: runtime.NumCPU(), MemoryGiB: float64(procInt("/proc/meminfo", "MemTotal:")) / (1 << 20),
			// pgxpool's default, which the api keeps without DATABASE_MAX_CONNS.
			APIPoolSize: max(4, runtime.NumCPU()), LoadAverageStart: loadAverage()}}}
	// Two runs on one cluster would drop each other's databases.
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, err
	}
	lock, err := os.Create(filepath.Join(cfg.DataDir, "run.lock"))
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return nil, fmt.Errorf("another bench run holds %s", lock.Name())
	}
	defer r.teardown()
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	for i, step := range []func(context.Context) error{r.stepLimit, r.stepNew, r.stepPlain, r.stepInstances, r.stepPooler, r.stepReplay,
		r.stepRateLimits, r.stepTracing, r.stepHiding, r.stepScale, r.stepEnqueuer, r.stepCompleter, r.stepReaper} {
		if len(cfg.Only) == 0 || slices.Contains(cfg.Only, Steps[i]) {
			r.logf("step %s", Steps[i])
			if err := step(ctx); err != nil {
				return r.report, fmt.Errorf("step %s: %w", Steps[i], err)
			}
		}
	}
	r.targets()
	r.report.Machine.LoadAverageEnd = loadAverage()
	r.report.Seconds = time.Since(r.start).Round(time.Second).Seconds()
	return r.report, nil
}

// procInt is the number after the field key in a /proc file ("VmHWM:" in
// /proc/<pid>/status, "tw" in /proc/net/sockstat), or -1.
func procInt(path, key string) int64 {
	data, _ := os.ReadFile(path)
	f := strings.Fields(string(data))
	if i := slices.Index(f, key); i >= 0 && i+1 < len(f) {
		if n, err := strconv.ParseInt(f[i+1], 10, 64); err == nil {
			return n
		}
	}
	return -1
}

// loadAverage is /proc/loadavg's first three fields: on a shared machine,
// what else was running.
func loadAverage() string {
	data, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(append(strings.Fields(string(data)), "?", "?", "?")[:3], " ")
}

// capFor bounds a step that can be cut short: want, or less when the run
// would otherwise overrun its budget, keeping reserve for the steps that
// follow. A busy shared machine slows every step; this keeps the whole
// run inside its budget anyway.
func (r *run) capFor(want, reserve time.Duration) time.Duration {
	return max(min(want, r.sz.budget-time.Since(r.start)-reserve), 5*time.Second)
}

func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(r.cfg.Log, "[%6.1fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

func (r *run) add(f Figure) {
	f.LoadAverage = strings.Fields(loadAverage())[0]
	r.report.Figures = append(r.report.Figures, f)
	p99 := map[bool]string{true: fmt.Sprintf(", p99 %s ms", formatFloat(f.P99Ms))}[f.P99Ms > 0]
	r.logf("  %s / %s: %s %s%s (%s)", f.Step, f.Name, formatFloat(f.Value), f.Unit, p99, f.Note)
}

// setup builds the commands, starts the cluster, creates and migrates its
// databases, captures the rides, and starts the Stripe fake and the api.
// shared_buffers is 1 GB, not the 128 MB that Postgres starts anywhere
// with: it holds the 400 MB unique index of 6M keys, as a database host
// sized for its table would.
func (r *run) setup(ctx context.Context) error {
	r.logf("building commands (package fleet), starting the cluster on port %d", r.cfg.Port)
	var err error
	if r.fleet, err = fleet.New(&fleet.Config{LogDir: filepath.Join(r.cfg.DataDir, "logs")}); err != nil {
		return err
	}
	r.cluster, err = localpg.Ensure(ctx, localpg.Options{
		DataDir: filepath.Join(r.cfg.DataDir, "postgres"), Port: r.cfg.Port, SharedBuffers: "1GB"})
	if err != nil {
		return err
	}
	if err := r.statementStats(ctx); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, r.cluster.URL())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, name := range []string{captureDB, capturePlainDB, limitDB, apiDB} {
		if _, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err == nil {
			_, err = conn.Exec(ctx, "CREATE DATABASE "+name)
		}
		if err == nil {
			_, err = r.fleet.Run(ctx, "migrate", []string{"DATABASE_URL=" + r.cluster.DatabaseURL(name)}, "up")
		}
		if err != nil {
			return fmt.Errorf("create database %s: %w", name, err)
		}
	}
	// Four connections: the bulk load's, two at a time, and its index
	// builds, all at once.
	if r.db, err = pgxpool.New(ctx, r.cluster.DatabaseURL(apiDB)+"&pool_max_conns=4&maintenance_work_mem=1GB"); err != nil {
		return err
	}
	m := &r.report.Machine
	if err := r.db.QueryRow(ctx, `
		SELECT split_part(version(), ' on ', 1), string_agg(name || '=' || current_setting(name), ' ')
		FROM unnest('{fsync,synchronous_commit,full_page_writes,wal_level,shared_buffers,max_wal_size,shared_preload_libraries}'::text[]) AS name`,
	).Scan(&m.Postgres, &m.Settings); err != nil {
		return err
	}
	r.logf("  %s; %s; capturing rides", m.Postgres, m.Settings)
	if r.capture, err = captureRides(ctx, r.cluster.DatabaseURL(captureDB), false); err != nil {
		return fmt.Errorf("capture rides: %w", err)
	}
	// The same on the key store's plain path, for the two side by side.
	plain, err := captureRides(ctx, r.cluster.DatabaseURL(capturePlainDB), true)
	if err != nil {
		return fmt.Errorf("capture rides on the plain path: %w", err)
	}
	r.report.Paths.Fast, r.report.Paths.Plain = r.capture.pathFigures(), plain.pathFigures()
	if r.fake, err = r.fleet.Start(ctx, "fakestripe"); err != nil {
		return err
	}
	r.fleet.AddEnv("DATABASE_URL="+r.cluster.DatabaseURL(apiDB), "STRIPE_API_KEY="+stripeKey, "STRIPE_API_BASE="+r.fake.URL)
	r.fleet.AddEnv(rateLimitEnv(r.cfg.RateLimits)...)
	if _, err := r.fleet.Run(ctx, "seed", nil); err != nil {
		return err
	}
	for id, email := range map[*int64]string{&r.userID: "user@example.com", &r.otherID: "user-bad-source@example.com"} {
		u, err := user.ByEmail(ctx, r.db, email)
		if err != nil {
			return err
		}
		*id = u.ID
	}
	var debug []string
	if r.cfg.Profile != "" {
		port, err := fleet.FreePort()
		if err != nil {
			return err
		}
		r.debugAddr = fmt.Sprintf("127.0.0.1:%d", port)
		debug = append(debug, "DEBUG_ADDR="+r.debugAddr)
	}
	_, err = r.startAPI(ctx, debug...)
	return err
}

// notReached is each rate limit's quota when the bench runs with them on:
// more than any step sends in a window.
const notReached = 1_000_000_000

// rateLimitEnv is the processes' rate limits: all off, or, with on, all
// on with quotas no step reaches, so that each request is counted and
// none refused.
func rateLimitEnv(on bool) []string {
	if !on {
		return []string{"RATE_LIMITS=off"}
	}
	q := strconv.Itoa(notReached)
	return []string{"RATE_LIMITS=on", "RATE_LIMIT_TOKEN_REQUESTS=" + q, "RATE_LIMIT_AUTH_FAILURES=" + q, "RATE_LIMIT_CHARGES=" + q}
}

// rateLimitsNote is how the report names the rate limits a run had.
func rateLimitsNote(on bool) string {
	if on {
		return "on, not reached"
	}
	return "off"
}

// startAPI starts one more api process.
func (r *run) startAPI(ctx context.Context, env ...string) (*fleet.Process, error) {
	p, err := r.fleet.Start(ctx, "api", env...)
	if err == nil {
		r.apis = append(r.apis, p)
	}
	return p, err
}

func (r *run) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if r.fleet != nil {
		_ = r.fleet.Stop(ctx)
	}
	if r.db != nil {
		r.db.Close()
	}
	if r.cluster.DataDir != "" && !r.cfg.Keep {
		_ = r.cluster.Stop(ctx)
	}
}

// references is what the api's CPU per ride reads against, those of
// the minimal design's api and of the I/O floor, each where measured.
func references(minimalAPI, floor time.Duration) string {
	var refs []string
	if minimalAPI > 0 {
		refs = append(refs, fmt.Sprintf("minimal design's api %.2f", ms(minimalAPI)))
	}
	if floor > 0 {
		refs = append(refs, fmt.Sprintf("I/O alone %.2f", ms(floor)))
	}
	if len(refs) == 0 {
		return ""
	}
	return " (" + strings.Join(refs, ", ") + ")"
}

// targets holds the figures to the goals the project set itself.
func (r *run) targets() {
	add := func(name, want string, measured, met bool, format string, args ...any) {
		t := Target{Name: name, Want: want}
		if measured {
			t.Got, t.Met = fmt.Sprintf(format, args...), &met
		}
		r.report.Targets = append(r.report.Targets, t)
	}
	n := r.newRides[32]
	limit, at := r.limit[r.bestAt], r.bestAt
	minimal := r.minimal[r.minimalAt]
	add("own-SQL ceiling vs the minimal four-transaction design (pgbench, best of each)", ">= 0.85 x minimal", limit > 0 && minimal > 0,
		limit/minimal >= 0.85, "%.0f (%d clients) / %.0f (%d clients) = %.2f", limit, at, minimal, r.minimalAt, limit/minimal)
	format := "%.0f / %.0f (best pgbench, %d clients) = %.2f"
	if l32 := r.limit[32]; l32 > 0 && at != 32 {
		format += fmt.Sprintf("; vs pgbench at 32 clients %.0f: %.2f", l32, n.Rate/l32)
	}
	if r.limitNear > 0 {
		format += fmt.Sprintf("; vs the same pgbench just before them %.0f: %.2f", r.limitNear, n.Rate/r.limitNear)
	}
	add("new rides/s at 32 clients vs own-SQL ceiling", ">= 0.70 x limit", n.Rate > 0 && limit > 0, n.Rate/limit >= 0.7,
		format, n.Rate, limit, at, n.Rate/limit)
	trips := r.capture.roundTrips()
	add("round trips per new ride, the token's look-up included", "<= 3", trips > 0, trips <= 3, "%d", trips)
	p99, p50 := ms(n.P99), ms(n.P50)
	add("p99 / p50 of new rides at 32 clients", "<= 5", p50 > 0, p99/p50 <= 5, "%.1f / %.1f ms = %.1f", p99, p50, p99/p50)
	add("latency hiding: 128 clients, Stripe 250 ms", ">= 0.85 x 512/s", r.hiding.Rate > 0, r.hiding.Rate/512 >= 0.85,
		"%.0f / 512 = %.2f", r.hiding.Rate, r.hiding.Rate/512)
	add("replays/s vs new rides/s at 32 clients", ">= 6 x", r.replays.Rate > 0 && n.Rate > 0, r.replays.Rate/n.Rate >= 6,
		"%.0f / %.0f = %.1f", r.replays.Rate, n.Rate, r.replays.Rate/n.Rate)
	for _, s := range []struct {
		what       string
		big, small LoadResult
	}{{"new rides", r.scaleNew, n}, {"replays", r.scaleReplay, r.replays}} {
		q := s.big.Rate / s.small.Rate
		add("scale: "+s.what+"/s with the keys loaded", ">= 0.90 x empty table", s.big.Rate > 0 && s.small.Rate > 0, q >= 0.9,
			"%.0f / %.0f = %.2f", s.big.Rate, s.small.Rate, q)
	}
	add("new rides/s, rate limits on and not reached, vs off", fmt.Sprintf(">= %.2f x", rateLimitsTarget), r.rateLimitsCost > 0,
		r.rateLimitsCost >= rateLimitsTarget, "%.3f", r.rateLimitsCost)
	during, before := ms(r.reaperLoad.P99), ms(r.reaperBase.P99)
	add("api p99 while the reaper runs vs before", "<= 1.25 x", during > 0 && before > 0, during/before <= 1.25,
		"%.1f / %.1f ms = %.2f", during, before, during/before)
	cpu := float64(r.apiCPU) / float64(time.Millisecond)
	add("api CPU per new ride at 32 clients", "<= 0.5 ms", r.apiCPU > 0, cpu <= 0.5, "%.2f ms%s", cpu, references(r.minimalAPICPU, r.floorCPU))
	mib := float64(r.peakRSS) / (1 << 20)
	add("api peak RSS (VmHWM) through 128 clients", "<= 64 MiB", r.peakRSS > 0, mib <= 64, "%.1f MiB", mib)
}
