package bench

import (
	"bytes"
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
	"time"
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

// created accepts a ride the api created just now.
func created(resp *http.Response, body []byte) error {
	if resp.StatusCode != http.StatusCreated {
		return statusError(resp, body)
	}
	if resp.Header.Get("Idempotent-Replayed") == "true" {
		return errors.New("replayed instead of created")
	}
	return nil
}

// replayed accepts a stored response replayed.
func replayed(resp *http.Response, body []byte) error {
	if resp.StatusCode != http.StatusCreated {
		return statusError(resp, body)
	}
	if resp.Header.Get("Idempotent-Replayed") != "true" {
		return errors.New("created instead of replayed")
	}
	return nil
}

func (r *run) key(tag string, c, n int) string {
	return fmt.Sprintf("bench-%s-%s-c%03d-n%07d", r.runID, tag, c, n)
}

// rideLoad is a load of new rides, each with a fresh key, spread over the
// given api processes.
func (r *run) rideLoad(tag string, clients int, apis []string, keep bool) Load {
	l := Load{
		Clients: clients, Warmup: r.sz.warmup, Duration: r.sz.step,
		Request: func(c, n int) (*http.Request, error) { return newRide(apis[c%len(apis)], r.key(tag, c, n)) },
		Check:   created,
	}
	if keep {
		l.OnSuccess = func(c, n int) {
			r.finishedMu.Lock()
			defer r.finishedMu.Unlock()
			if len(r.finished) < 50_000 {
				r.finished = append(r.finished, r.key(tag, c, n))
			}
		}
	}
	return l
}

// replaysOf is a load of replays, each of a key picked at random.
func (r *run) replaysOf(keys []string, clients int) Load {
	return Load{
		Clients: clients, Warmup: r.sz.warmup, Duration: r.sz.step,
		Request: func(c, n int) (*http.Request, error) {
			return newRide(r.apiURLs[0], keys[rand.IntN(len(keys))])
		},
		Check: replayed,
	}
}

func loadFigure(step, name string, res LoadResult, unit string) Figure {
	return Figure{
		Step: step, Name: name, Clients: res.Clients, Value: res.Rate, Unit: unit,
		P50Ms: ms(res.Latency.P50), P99Ms: ms(res.Latency.P99), Errors: res.Errors, Note: errorNote(res.ErrorKinds),
	}
}

// ratioTo sets f's ratio to the pgbench limit at the same client count,
// or at 32 clients beyond pgbench's counts.
func (r *run) ratioToLimit(f *Figure, clients int) {
	if limit, n := r.ceiling(); limit > 0 {
		f.Ratio, f.RatioOf = f.Value/limit, fmt.Sprintf("best pgbench (%d clients)", n)
	}
}

// ceiling is the limit: the best pgbench rate at any client count, and
// that count. The api is held to it rather than to pgbench at the api's own
// client count, which may have fared worse.
func (r *run) ceiling() (float64, int) {
	var best float64
	var at int
	for n, tps := range r.limit {
		if tps > best || tps == best && n < at {
			best, at = tps, n
		}
	}
	return best, at
}

// stepNew measures new rides at each client count and the api's memory,
// then, in a separate pass at 32 clients, what the database and the api
// spend their time on. The figures come from passes nothing observes: the
// session sampler, the CPU profiler and pprof's report would take CPU
// from the api and Postgres.
func (r *run) stepNew(ctx context.Context) error {
	for _, clients := range r.sz.newClients {
		tw := timeWait()
		l := r.rideLoad(fmt.Sprintf("new%d", clients), clients, r.apiURLs[:1], true)
		if clients < 32 {
			l.Warmup, l.Duration = r.sz.warmup/2, r.sz.short
		}
		meter := r.cpuMeter(map[string]int{"api": r.apis[0].pid(), "stripe fake": r.fake.pid(), "load generator": os.Getpid()})
		begin := time.Now()
		res, err := l.Run(ctx)
		if err != nil {
			return err
		}
		r.report.Findings.CPU = append(r.report.Findings.CPU, meter.perRequest(
			fmt.Sprintf("api, %d clients", clients), int64(res.Total), time.Since(begin), nil))
		r.newRides[clients] = res
		fig := loadFigure("2 new rides", "POST /rides, fresh key", res, "rides/s")
		r.ratioToLimit(&fig, clients)
		if clients >= 32 {
			fig.Note = strings.TrimPrefix(fig.Note+"; "+timeWaitNote(tw), "; ")
		}
		r.add(fig)
	}
	rss, err := peakRSS(r.apis[0].pid())
	if err != nil {
		return fmt.Errorf("read the api's peak RSS: %w", err)
	}
	r.peakRSS = rss
	r.add(Figure{Step: "7 memory", Name: "api peak RSS (VmHWM)", Clients: r.sz.newClients[len(r.sz.newClients)-1],
		Value: float64(rss) / (1 << 20), Unit: "MiB", Note: "since the api started, through every client count"})
	return r.observeNew(ctx)
}

// observeNew runs new rides at 32 clients once more, observed: sessions
// sampled, the api's CPU profiled, the database's counters read around
// it. Its rate is not a figure.
func (r *run) observeNew(ctx context.Context) error {
	before, err := readPosition(ctx, r.db)
	if err != nil {
		return err
	}
	sampler := startWaitSampler(ctx, r.benchURL(apiDB), apiDB)
	profile := r.profileAPI(ctx, r.sz.warmup, r.sz.step)
	res, err := r.rideLoad("observed32", 32, r.apiURLs[:1], true).Run(ctx)
	if err != nil {
		sampler.stop()
		return err
	}
	after, err := readPosition(ctx, r.db)
	if err != nil {
		return err
	}
	f := &r.report.Findings
	f.WaitEvents = append(f.WaitEvents, WaitEvents{Source: "api, 32 clients", Counts: sampler.stop()})
	f.PerRide = append(f.PerRide, after.perRide("api, 32 clients", before, int64(res.Total)))
	f.Profile = <-profile
	return nil
}

// profileAPI fetches a CPU profile of the first api over the measured
// part of a step, if the api serves pprof on DEBUG_ADDR, and returns the
// top of it (or why there is none).
func (r *run) profileAPI(ctx context.Context, warmup, d time.Duration) chan string {
	out := make(chan string, 1)
	go func() {
		select {
		case <-time.After(warmup):
		case <-ctx.Done():
			out <- ""
			return
		}
		secs := max(1, int(d.Seconds())-1)
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", r.debugAddr, secs)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := (&http.Client{Timeout: d + 30*time.Second}).Do(req)
		if err != nil {
			out <- "none: the api serves no pprof on DEBUG_ADDR (" + err.Error() + ")"
			return
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			out <- fmt.Sprintf("none: GET %s answered %d", url, resp.StatusCode)
			return
		}
		path := filepath.Join(r.cfg.DataDir, "api-cpu-32.pprof")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			out <- "none: " + err.Error()
			return
		}
		top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=25", r.bin("api"), path).CombinedOutput()
		if err != nil {
			out <- fmt.Sprintf("saved %s; go tool pprof failed: %v", path, err)
			return
		}
		out <- fmt.Sprintf("saved %s\n%s", path, strings.TrimSpace(string(top)))
	}()
	return out
}

// stepInstances measures two api processes sharing the load against one.
func (r *run) stepInstances(ctx context.Context) error {
	one, ok := r.newRides[32]
	if !ok {
		res, err := r.rideLoad("one32", 32, r.apiURLs[:1], true).Run(ctx)
		if err != nil {
			return err
		}
		one = res
		r.add(loadFigure("2b instances", "1 api process", one, "rides/s"))
	}
	measure := func(name, tag string, env ...string) error {
		p, err := r.startAPI(ctx, false, env...)
		if err != nil {
			return err
		}
		defer func() {
			p.stop()
			r.apis, r.apiURLs = r.apis[:1], r.apiURLs[:1]
		}()
		apis := r.apiURLs[:2]
		if len(env) > 0 {
			apis = r.apiURLs[1:2]
		}
		res, err := r.rideLoad(tag, 32, apis, true).Run(ctx)
		if err != nil {
			return err
		}
		fig := loadFigure("2b instances", name, res, "rides/s")
		if one.Rate > 0 {
			fig.Ratio, fig.RatioOf = res.Rate/one.Rate, "1 api process"
		}
		r.add(fig)
		return nil
	}
	if err := measure("2 api processes, one database", "two32"); err != nil {
		return err
	}
	// Not an instance count but the same question: how many database
	// connections one process needs to keep 32 rides moving.
	return measure("1 api process, DATABASE_MAX_CONNS=32", "pool32", "DATABASE_MAX_CONNS=32")
}

// finishedKeys returns keys of finished rides, making some if the new
// step did not run.
func (r *run) finishedKeys(ctx context.Context) ([]string, error) {
	r.finishedMu.Lock()
	keys := append([]string(nil), r.finished...)
	r.finishedMu.Unlock()
	if len(keys) >= 100 {
		return keys, nil
	}
	l := r.rideLoad("seedreplay", 8, r.apiURLs[:1], true)
	l.Warmup, l.Duration = 0, 2*time.Second
	if _, err := l.Run(ctx); err != nil {
		return nil, err
	}
	r.finishedMu.Lock()
	defer r.finishedMu.Unlock()
	if len(r.finished) == 0 {
		return nil, errors.New("no ride finished; see the api's log")
	}
	return append([]string(nil), r.finished...), nil
}

// stepReplay measures replays of finished keys: each request a key picked
// at random from the rides the new step finished, and all clients
// replaying one key, as after a retry storm.
func (r *run) stepReplay(ctx context.Context) error {
	keys, err := r.finishedKeys(ctx)
	if err != nil {
		return err
	}
	res, err := r.measured(ctx, "api replays, 32 clients", r.replaysOf(keys, 32))
	if err != nil {
		return err
	}
	r.replays = &res
	fig := loadFigure("3 replays", fmt.Sprintf("finished key, random of %d", len(keys)), res, "responses/s")
	if n, ok := r.newRides[32]; ok && n.Rate > 0 {
		fig.Ratio, fig.RatioOf = res.Rate/n.Rate, "new rides 32 clients"
	}
	r.add(fig)

	hot := r.replaysOf(keys[:1], 32)
	hot.Duration = r.sz.step / 2
	hotRes, err := hot.Run(ctx)
	if err != nil {
		return err
	}
	fig = loadFigure("3 replays", "one key, all clients", hotRes, "responses/s")
	fig.Note = strings.TrimPrefix(fig.Note+"; a retry storm on one key", "; ")
	r.add(fig)
	return nil
}

// setLatency sets the fake's charge latency.
func (r *run) setLatency(ctx context.Context, d time.Duration) error {
	body := fmt.Sprintf(`{"latency_ms": %d}`, d.Milliseconds())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.fakeURL+"/_fake/faults", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("set fake latency: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("set fake latency: %d %s", resp.StatusCode, msg)
	}
	return nil
}

// stepHiding measures whether the api keeps 128 rides in flight while
// each waits 250 ms on Stripe: ideally 128/0.25 = 512 rides/s.
func (r *run) stepHiding(ctx context.Context) error {
	if err := r.setLatency(ctx, 250*time.Millisecond); err != nil {
		return err
	}
	tw := timeWait()
	res, err := r.rideLoad("hide128", 128, r.apiURLs[:1], false).Run(ctx)
	if lerr := r.setLatency(context.WithoutCancel(ctx), 0); err == nil {
		err = lerr
	}
	if err != nil {
		return err
	}
	r.hiding = &res
	fig := loadFigure("4 latency hiding", "Stripe at 250 ms, default pool", res, "rides/s")
	fig.Ratio, fig.RatioOf = res.Rate/512, "ideal 128/0.25 s"
	if zero, ok := r.newRides[128]; ok && zero.Rate > 0 {
		// The ideal assumes the rest of a ride is free; the api cannot
		// beat what it does with Stripe at 0 ms either.
		fig.Note = strings.TrimPrefix(fig.Note+fmt.Sprintf("; %.2f x the 0 ms rate at 128 clients", res.Rate/zero.Rate), "; ")
	}
	fig.Note = strings.TrimPrefix(fig.Note+"; "+timeWaitNote(tw), "; ")
	r.add(fig)
	return nil
}
