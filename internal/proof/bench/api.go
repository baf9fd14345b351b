package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

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
func created(resp *http.Response, body []byte) error  { return answered(resp, body, false) }
func replayed(resp *http.Response, body []byte) error { return answered(resp, body, true) }

func answered(resp *http.Response, body []byte, replay bool) error {
	if resp.StatusCode != http.StatusCreated {
		return statusError(resp, body)
	}
	switch got := resp.Header.Get("Idempotent-Replayed") == "true"; {
	case replay && !got:
		return errors.New("created instead of replayed")
	case !replay && got:
		return errors.New("replayed instead of created")
	}
	return nil
}

// rideLoad is a load of new rides from clients, each with a fresh key,
// spread over apis; keep remembers the keys for the replay step.
func (r *run) rideLoad(tag string, clients int, apis []*fleet.Process, keep bool) Load {
	key := func(c, n int) string { return fmt.Sprintf("bench-%s-%s-c%03d-n%07d", r.runID, tag, c, n) }
	l := Load{Clients: clients, Warmup: r.sz.warmup, Duration: r.sz.step, Check: created,
		Request: func(c, n int) (*http.Request, error) { return newRide(apis[c%len(apis)].URL, key(c, n)) }}
	if keep {
		l.OnSuccess = func(c, n int) {
			r.finishedMu.Lock()
			defer r.finishedMu.Unlock()
			if len(r.finished) < 50_000 {
				r.finished = append(r.finished, key(c, n))
			}
		}
	}
	return l
}

// replaysOf is a load of replays at 32 clients, each of the key keys
// picks.
func (r *run) replaysOf(keys func() string) Load {
	return Load{Clients: 32, Warmup: r.sz.warmup, Duration: r.sz.step, Check: replayed,
		Request: func(c, n int) (*http.Request, error) { return newRide(r.apis[0].URL, keys()) }}
}

func loadFigure(step, name string, res LoadResult, unit string) Figure {
	return Figure{Step: step, Name: name, Clients: res.Clients, Value: res.Rate, Unit: unit,
		P50Ms: ms(res.Latency.P50), P99Ms: ms(res.Latency.P99), Errors: res.Errors, Note: errorNote(res.ErrorKinds)}
}

// timeWaitNote says how many TCP sockets entered TIME_WAIT since before:
// each is a connection closed in the last minute, so thousands over a step
// mean connections opened per request instead of reused.
func timeWaitNote(before int64) string {
	return fmt.Sprintf("TIME_WAIT sockets %+d", procInt("/proc/net/sockstat", "tw")-before)
}

// ratio sets f's ratio to of, named ofName, when of is known.
func (f *Figure) ratio(of float64, ofName string) {
	if of > 0 {
		f.Ratio, f.RatioOf = f.Value/of, ofName
	}
}

func (f *Figure) note(s string) { f.Note = strings.TrimPrefix(f.Note+"; "+s, "; ") }

// ceiling is the limit: the best pgbench rate at any client count, and
// that count. The api is held to it rather than to pgbench at its own
// client count, which may have fared worse.
func (r *run) ceiling() (best float64, at int) {
	for n, tps := range r.limit {
		if tps > best || tps == best && n < at {
			best, at = tps, n
		}
	}
	return best, at
}

// stepNew measures new rides at each client count, then the api's memory.
func (r *run) stepNew(ctx context.Context) error {
	for _, clients := range r.sz.newClients {
		tw := procInt("/proc/net/sockstat", "tw")
		l := r.rideLoad(fmt.Sprintf("new%d", clients), clients, r.apis[:1], true)
		if clients < 32 {
			l.Warmup, l.Duration = r.sz.warmup/2, r.sz.short
		}
		res, err := r.measured(ctx, fmt.Sprintf("api, %d clients", clients), l)
		if err != nil {
			return err
		}
		r.newRides[clients] = res
		fig := loadFigure("2 new rides", "POST /rides, fresh key", res, "rides/s")
		limit, at := r.ceiling()
		fig.ratio(limit, fmt.Sprintf("best pgbench (%d clients)", at))
		if clients >= 32 {
			fig.note(timeWaitNote(tw))
		}
		r.add(fig)
	}
	r.peakRSS = procInt(fmt.Sprintf("/proc/%d/status", r.apis[0].Pid()), "VmHWM:") << 10
	r.add(Figure{Step: "7 memory", Name: "api peak RSS (VmHWM)", Clients: r.sz.newClients[len(r.sz.newClients)-1],
		Value: float64(r.peakRSS) / (1 << 20), Unit: "MiB", Note: "since the api started, through every client count"})
	return nil
}

// stepInstances measures two api processes sharing the load against one,
// and (the same question: how many database connections one process needs
// to keep 32 rides moving) one process with a pool of 32.
func (r *run) stepInstances(ctx context.Context) error {
	one, ok := r.newRides[32]
	if !ok {
		var err error
		if one, err = r.rideLoad("one32", 32, r.apis[:1], true).Run(ctx); err != nil {
			return err
		}
		r.add(loadFigure("2b instances", "1 api process", one, "rides/s"))
	}
	for i, name := range []string{"2 api processes, one database", "1 api process, DATABASE_MAX_CONNS=32"} {
		p, err := r.startAPI(ctx, [][]string{nil, {"DATABASE_MAX_CONNS=32"}}[i]...)
		if err != nil {
			return err
		}
		res, err := r.rideLoad(fmt.Sprintf("instances%d", i), 32, r.apis[i:2], true).Run(ctx)
		r.apis = r.apis[:1]
		if serr := p.Stop(ctx); err == nil {
			err = serr
		}
		if err != nil {
			return err
		}
		fig := loadFigure("2b instances", name, res, "rides/s")
		fig.ratio(one.Rate, "1 api process")
		r.add(fig)
	}
	return nil
}

// stepReplay measures replays of finished keys: each request a key picked
// at random from the rides the new step finished, then all clients
// replaying one key, as after a retry storm.
func (r *run) stepReplay(ctx context.Context) error {
	if len(r.finished) < 100 {
		l := r.rideLoad("seedreplay", 8, r.apis[:1], true)
		l.Warmup, l.Duration = 0, 2*time.Second
		if _, err := l.Run(ctx); err != nil || len(r.finished) == 0 {
			return fmt.Errorf("no ride finished to replay (see the api's log): %v", err)
		}
	}
	keys := r.finished
	var err error
	r.replays, err = r.measured(ctx, "api replays, 32 clients", r.replaysOf(func() string { return keys[rand.IntN(len(keys))] }))
	if err != nil {
		return err
	}
	fig := loadFigure("3 replays", fmt.Sprintf("finished key, random of %d", len(keys)), r.replays, "responses/s")
	fig.ratio(r.newRides[32].Rate, "new rides 32 clients")
	r.add(fig)
	hot := r.replaysOf(func() string { return keys[0] })
	hot.Duration /= 2
	res, err := hot.Run(ctx)
	if err != nil {
		return err
	}
	fig = loadFigure("3 replays", "one key, all clients", res, "responses/s")
	fig.note("a retry storm on one key")
	r.add(fig)
	return nil
}

// setLatency sets the fake's charge latency.
func (r *run) setLatency(ctx context.Context, d time.Duration) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.fake.URL+"/_fake/faults",
		strings.NewReader(fmt.Sprintf(`{"latency_ms": %d}`, d.Milliseconds())))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("set fake latency: %w", err)
	}
	defer resp.Body.Close()
	if msg, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK {
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
	tw := procInt("/proc/net/sockstat", "tw")
	res, err := r.rideLoad("hide128", 128, r.apis[:1], false).Run(ctx)
	if lerr := r.setLatency(context.WithoutCancel(ctx), 0); err == nil {
		err = lerr
	}
	if err != nil {
		return err
	}
	r.hiding = res
	fig := loadFigure("4 latency hiding", "Stripe at 250 ms, default pool", res, "rides/s")
	fig.ratio(512, "ideal 128/0.25 s")
	if zero := r.newRides[128]; zero.Rate > 0 {
		// The ideal assumes the rest of a ride is free; the api cannot
		// beat what it does with Stripe at 0 ms either.
		fig.note(fmt.Sprintf("%.2f x the 0 ms rate at 128 clients", res.Rate/zero.Rate))
	}
	fig.note(timeWaitNote(tw))
	r.add(fig)
	return nil
}
