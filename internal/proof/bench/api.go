package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rocketrides/rocketrides/internal/testkit/fleet"
)

// newRide is a POST /rides under key.
func newRide(base, key string) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodPost, base+"/rides", bytes.NewReader(rideBody))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+seedToken)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}

// created accepts a ride the api created just now, replayed a stored
// response replayed.
var created, replayed = answered(false, "replayed instead of created"), answered(true, "created instead of replayed")

func answered(replay bool, wrong string) func(*http.Response, []byte) error {
	return func(resp *http.Response, body []byte) error {
		if resp.StatusCode != http.StatusCreated {
			return statusError(resp, body)
		} else if (resp.Header.Get("Idempotent-Replayed") == "true") != replay {
			return errors.New(wrong)
		}
		return nil
	}
}

// rideLoad is a load of new rides from clients, each with a fresh key,
// spread over apis.
func (r *run) rideLoad(tag string, clients int, apis []*fleet.Process) Load {
	return Load{Clients: clients, Warmup: r.sz.warmup, Duration: r.sz.step, Check: created,
		Request: func(c, n int) (*http.Request, error) {
			return newRide(apis[c%len(apis)].URL, fmt.Sprintf("bench-%s-%s-c%03d-n%07d", r.runID, tag, c, n))
		}}
}

// replaysOf is a load of replays at 32 clients of the keys keys picks.
func (r *run) replaysOf(keys func() string) Load {
	return Load{Clients: 32, Warmup: r.sz.warmup, Duration: r.sz.step, Check: replayed,
		Request: func(c, n int) (*http.Request, error) { return newRide(r.apis[0].URL, keys()) }}
}

// measure runs l and adds its figure (see figure), with the notes made
// from the result and from how many TCP sockets entered TIME_WAIT
// meanwhile: each is a connection closed in the last minute, so thousands
// over a step mean connections opened per request instead of reused.
func (r *run) measure(ctx context.Context, l Load, f Figure, of float64, notes ...func(LoadResult, int64) string) (LoadResult, error) {
	tw := procInt("/proc/net/sockstat", "tw")
	res, err := l.Run(ctx)
	if err != nil {
		return res, err
	}
	var extra []string
	for _, note := range notes {
		extra = append(extra, note(res, procInt("/proc/net/sockstat", "tw")-tw))
	}
	r.figure(f, res, of, extra...)
	return res, nil
}

// figure adds f with res's figures, its ratio to of (named f.RatioOf) when
// of is known, and res's errors, f.Note and notes as its note.
func (r *run) figure(f Figure, res LoadResult, of float64, notes ...string) {
	f.Clients, f.Value, f.P50Ms, f.P99Ms, f.Errors = res.Clients, res.Rate, ms(res.P50), ms(res.P99), res.Errors
	if of > 0 {
		f.Ratio = res.Rate / of
	} else {
		f.RatioOf = ""
	}
	f.Note = joinNotes(append([]string{errorNote(res.ErrorKinds), f.Note}, notes...)...)
	r.add(f)
}

// joinNotes is a figure's note made of notes, the empty ones left out.
func joinNotes(notes ...string) string {
	return strings.Join(slices.DeleteFunc(notes, func(s string) bool { return s == "" }), "; ")
}

func timeWait(_ LoadResult, tw int64) string { return fmt.Sprintf("TIME_WAIT sockets %+d", tw) }

// stepNew measures new rides at each client count, what each cost the
// api's CPU and Postgres's at 32 clients, then the api's memory.
func (r *run) stepNew(ctx context.Context) error {
	for _, clients := range r.sz.newClients {
		l := r.rideLoad(fmt.Sprintf("new%d", clients), clients, r.apis[:1])
		notes := []func(LoadResult, int64) string{timeWait}
		if clients < 32 {
			l.Warmup, l.Duration, notes = r.sz.warmup/2, r.sz.short, nil
		}
		measure := func() (LoadResult, error) {
			return r.measure(ctx, l, Figure{Step: "2 new rides", Name: "POST /rides, fresh key", Unit: "rides/s",
				RatioOf: fmt.Sprintf("best pgbench (%d clients)", r.bestAt)}, r.limit[r.bestAt], notes...)
		}
		var res LoadResult
		var err error
		if clients == 32 && r.bestAt > 0 {
			if err := r.limitAgain(ctx); err != nil {
				return fmt.Errorf("the ceiling again: %w", err)
			}
		}
		if clients == 32 {
			res, err = r.withCosts(ctx, l.Warmup+l.Duration, measure)
		} else {
			res, err = measure()
		}
		if err != nil {
			return err
		}
		r.newRides[clients] = res
		if clients == 32 {
			r.report.Paths.Fast.Rate = res.Rate
		}
		if clients == 32 {
			if err := r.floorAt(ctx, res.Rate); err != nil {
				return fmt.Errorf("the api's I/O floor: %w", err)
			}
			if err := r.minimalAPIAt(ctx, res.Rate); err != nil {
				return fmt.Errorf("the minimal design's api: %w", err)
			}
		}
	}
	r.peakRSS = procInt(fmt.Sprintf("/proc/%d/status", r.apis[0].Pid()), "VmHWM:") << 10
	r.add(Figure{Step: "7 memory", Name: "api peak RSS (VmHWM)", Clients: r.sz.newClients[len(r.sz.newClients)-1],
		Value: float64(r.peakRSS) / (1 << 20), Unit: "MiB", Note: "since the api started, through every client count"})
	return nil
}

// withCosts runs measure, a load that lasts d, between two samples of
// the CPU the api and Postgres have used and, with Config.Profile, under a
// CPU profile of the api; then it adds what each ride cost (cpuFigures).
func (r *run) withCosts(ctx context.Context, d time.Duration, measure func() (LoadResult, error)) (LoadResult, error) {
	before, err := r.cpuUse(ctx)
	if err != nil {
		return LoadResult{}, err
	}
	res, err := r.underProfile(ctx, d, measure)
	if err != nil {
		return res, err
	}
	after, err := r.cpuUse(ctx)
	if err != nil {
		return res, err
	}
	return res, r.cpuFigures(before, after)
}

// underProfile runs measure, a load that lasts d, while profile takes a
// CPU profile of the api over d. A load that fails ends the profile too,
// instead of leaving the run waiting out the rest of d for a profile it
// will not use.
func (r *run) underProfile(ctx context.Context, d time.Duration, measure func() (LoadResult, error)) (LoadResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	profiled := make(chan error, 1)
	go func() { profiled <- r.profile(ctx, d) }()
	res, err := measure()
	if err != nil {
		cancel()
		// The load's error is the one to return; the profile's, most
		// likely the cancellation, goes to the log.
		if perr := <-profiled; perr != nil {
			r.logf("  profile abandoned: %v", perr)
		}
		return res, err
	}
	return res, <-profiled
}

// cpuFigures adds the CPU the api and Postgres spent per ride between
// before and after (the whole load, warm-up included, over every ride it
// made), and what the instruments on the same cores spent: on a machine
// this small they share the CPU the api and Postgres would have.
func (r *run) cpuFigures(before, after cpuUse) error {
	per := before.perRide(after)
	if per.rides == 0 {
		return fmt.Errorf("no rides made between two CPU samples")
	}
	r.apiCPU = per.apiUser + per.apiSystem
	r.report.Paths.Fast.APICPUMs, r.report.Paths.Fast.PostgresCPUMs = ms(r.apiCPU), ms(per.postgres)
	note := fmt.Sprintf("user %.3f + system %.3f ms, over %d rides", ms(per.apiUser), ms(per.apiSystem), per.rides)
	if per.fake > 0 {
		// The fake's code is the same from run to run, so its CPU per
		// charge moves only with the machine's speed, which on a shared
		// machine drifts between runs and between steps.
		note += fmt.Sprintf("; %.2f x the Stripe fake's, whose code does not change: compare runs by this", float64(r.apiCPU)/float64(per.fake))
	}
	r.add(Figure{Step: "2 new rides", Name: "api CPU per new ride", Clients: 32, Value: ms(r.apiCPU), Unit: "ms", Note: note})
	if per.postgres > 0 {
		r.add(Figure{Step: "2 new rides", Name: "Postgres CPU per new ride", Clients: 32, Value: ms(per.postgres), Unit: "ms",
			Note: "the postmaster and its children: backends, WAL writer, checkpointer"})
	}
	total := r.apiCPU + per.postgres + per.fake + per.load
	r.add(Figure{Step: "2 new rides", Name: "every process's CPU per new ride", Clients: 32, Value: ms(total), Unit: "ms",
		Note: fmt.Sprintf("api %.3f + Postgres %.3f + the Stripe fake %.3f + the load's clients (this process) %.3f ms; %d CPUs give %.0f ms a second",
			ms(r.apiCPU), ms(per.postgres), ms(per.fake), ms(per.load), runtime.NumCPU(), float64(runtime.NumCPU())*1000)})
	return nil
}

// floorAt measures the api's I/O floor (floor.go) at rate rides a
// second from 32 clients, the api's own rate just measured, and adds its
// CPU per ride beside the api's.
func (r *run) floorAt(ctx context.Context, rate float64) (err error) {
	r.floorCPU, err = r.referenceAt(ctx, rate, "-floor", "the api's I/O alone, CPU per ride",
		"a server making a new ride's exchanges and nothing else (floor.go)")
	return err
}

// minimalAPIDB is the minimal design's api's database: cost.go's schema,
// its rider a customer the Stripe fake knows.
const minimalAPIDB = "bench_minimal_api"

// minimalAPIAt measures the minimal design's api (minimal.go) as floorAt
// measures the floor, on a database of its own made afresh.
func (r *run) minimalAPIAt(ctx context.Context, rate float64) (err error) {
	var customer string
	if err := r.db.QueryRow(ctx, floorCustomerSQL).Scan(&customer); err != nil {
		return fmt.Errorf("the seeded rider's customer: %w", err)
	}
	c, err := r.db.Acquire(ctx)
	if err != nil {
		return err
	}
	_, err = r.createMinimal(ctx, c.Conn(), minimalAPIDB, customer)
	c.Release()
	if err != nil {
		return err
	}
	r.minimalAPICPU, err = r.referenceAt(ctx, rate, "-minimal-api", "the minimal design's api, CPU per ride",
		"the article's four phases with the same libraries and nothing else (minimal.go)",
		"DATABASE_URL="+r.cluster.DatabaseURL(minimalAPIDB))
	return err
}

// referenceAt runs bench with arg, a server the api's CPU is read
// against, at rate new rides a second from 32 clients, each with a key of
// its own, and adds its CPU per ride as the figure name.
func (r *run) referenceAt(ctx context.Context, rate float64, arg, name, what string, env ...string) (time.Duration, error) {
	p, err := r.fleet.StartArgs(ctx, "bench", []string{arg}, env...)
	if err != nil {
		return 0, err
	}
	defer func() { _ = p.Stop(context.WithoutCancel(ctx)) }()
	l := r.rideLoad("ref"+strings.TrimLeft(arg, "-"), 32, []*fleet.Process{p})
	l.Warmup, l.Rate = r.sz.warmup/2, rate
	// Its CPU over the rides it made, warm-up included, both counted by
	// the process itself (GET /healthz answers its rides so far).
	cpu0, rides0, err := referenceUse(ctx, p)
	if err != nil {
		return 0, err
	}
	res, err := l.Run(ctx)
	if err != nil {
		return 0, err
	}
	if res.OK == 0 {
		return 0, fmt.Errorf("%s: no rides, %d errors (%s)", arg, res.Errors, errorNote(res.ErrorKinds))
	}
	cpu1, rides1, err := referenceUse(ctx, p)
	if err != nil {
		return 0, err
	}
	per := (cpu1 - cpu0) / time.Duration(rides1-rides0)
	r.add(Figure{Step: "2 new rides", Name: name, Clients: 32, Value: ms(per), Unit: "ms", Errors: res.Errors,
		Note: joinNotes(errorNote(res.ErrorKinds), fmt.Sprintf("%s, at the api's %.0f rides/s; %.0f/s reached", what, rate, res.Rate))})
	return per, nil
}

// referenceUse is a reference server's CPU time and its rides so far.
func referenceUse(ctx context.Context, p *fleet.Process) (time.Duration, int64, error) {
	user, system, _ := procCPU(p.Pid())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/healthz", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var rides int64
	if _, err := fmt.Fscan(resp.Body, &rides); err != nil {
		return 0, 0, fmt.Errorf("the count of its rides: %w", err)
	}
	return user + system, rides, nil
}

// stepInstances measures two api processes sharing the load against one,
// and (the same question: how many database connections one process needs
// to keep 32 rides moving) one process with a pool of 32.
func (r *run) stepInstances(ctx context.Context) error {
	for i, name := range []string{"2 api processes, one database", "1 api process, DATABASE_MAX_CONNS=32"} {
		p, err := r.startAPI(ctx, [][]string{nil, {"DATABASE_MAX_CONNS=32"}}[i]...)
		if err != nil {
			return err
		}
		_, err = r.measure(ctx, r.rideLoad(fmt.Sprintf("instances%d", i), 32, r.apis[i:2]),
			Figure{Step: "2b instances", Name: name, Unit: "rides/s", RatioOf: "1 api process"}, r.newRides[32].Rate)
		r.apis = r.apis[:1]
		if err = errors.Join(err, p.Stop(ctx)); err != nil {
			return err
		}
	}
	return nil
}

// stepReplay measures replays of finished keys: each request a key picked
// at random from the rides the steps before finished, then all clients
// replaying one key, as after a retry storm.
func (r *run) stepReplay(ctx context.Context) error {
	rows, _ := r.db.Query(ctx, `SELECT idempotency_key FROM idempotency_keys WHERE recovery_point = 'finished' LIMIT 50000`)
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(keys) == 0 {
		return fmt.Errorf("find rides to replay, which the new step makes: %v", err)
	}
	if r.replays, err = r.measure(ctx, r.replaysOf(func() string { return keys[rand.IntN(len(keys))] }),
		Figure{Step: "3 replays", Name: fmt.Sprintf("finished key, random of %d", len(keys)), Unit: "responses/s",
			RatioOf: "new rides 32 clients"}, r.newRides[32].Rate); err != nil {
		return err
	}
	hot := r.replaysOf(func() string { return keys[0] })
	hot.Duration /= 2
	_, err = r.measure(ctx, hot, Figure{Step: "3 replays", Name: "one key, all clients", Unit: "responses/s",
		Note: "a retry storm on one key"}, 0)
	return err
}

// setLatency sets the fake's charge latency.
func (r *run) setLatency(d time.Duration) error {
	resp, err := http.Post(r.fake.URL+"/_fake/faults", "application/json",
		strings.NewReader(fmt.Sprintf(`{"latency_ms": %d}`, d.Milliseconds())))
	if err == nil {
		if resp.Body.Close(); resp.StatusCode != http.StatusOK {
			err = errors.New(resp.Status)
		}
	}
	if err != nil {
		return fmt.Errorf("set fake latency: %w", err)
	}
	return nil
}

// stepHiding measures whether the api keeps 128 rides in flight while
// each waits 250 ms on Stripe: ideally 128/0.25 = 512 rides/s. The ideal
// assumes the rest of a ride is free; the api cannot beat what it does
// with Stripe at 0 ms either.
func (r *run) stepHiding(ctx context.Context) error {
	if err := r.setLatency(250 * time.Millisecond); err != nil {
		return err
	}
	var err error
	r.hiding, err = r.measure(ctx, r.rideLoad("hide128", 128, r.apis[:1]), Figure{Step: "4 latency hiding",
		Name: "Stripe at 250 ms, default pool", Unit: "rides/s", RatioOf: "ideal 128/0.25 s"}, 512,
		func(res LoadResult, _ int64) string {
			if zero := r.newRides[128].Rate; zero > 0 {
				return fmt.Sprintf("%.2f x the 0 ms rate at 128 clients", res.Rate/zero)
			}
			return ""
		}, timeWait)
	return errors.Join(err, r.setLatency(0))
}
