package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet"
)

// The kinds of Stripe fault injected through the fake's /_fake/faults.
const (
	// FaultFailNext fails the next charge requests before they execute.
	FaultFailNext = "fail_next"
	// FaultDropAfterCommit charges, then drops the connection: the
	// ambiguous timeout.
	FaultDropAfterCommit = "drop_after_commit_next"
	// FaultLatency slows every charge down for a while.
	FaultLatency = "latency"
)

// faults counts what the monkeys did, and what went wrong doing it.
type faults struct {
	mu              sync.Mutex
	apiKills        int
	completerKills  int
	pgRestarts      int
	rounds          []round        // of the failover drill
	degraded        []window       // no synchronous standby (failover drill)
	readyzAlone     []time.Time    // /readyz said the primary alone confirms commits
	readyzConfirmed []time.Time    // /readyz said a standby confirms them
	readyzWaiting   []time.Time    // /readyz said commits wait for a standby (503)
	readyzOther     map[string]int // any other answer of /readyz, by status and code
	stripe          map[string]int // injections by kind
	stripeRequests  map[string]int // charge requests targeted, by kind
	network         map[string]int // network faults by kind (NetReset, ...)
	networkLinks    map[string]int // network faults by link
	problems        []string       // a monkey that failed: the soak is void
}

func newFaults() *faults {
	return &faults{stripe: map[string]int{}, stripeRequests: map[string]int{}, readyzOther: map[string]int{},
		network: map[string]int{}, networkLinks: map[string]int{}}
}

func (f *faults) count(fn func(*faults)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *faults) problem(format string, args ...any) {
	f.count(func(f *faults) { f.problems = append(f.problems, fmt.Sprintf(format, args...)) })
}

// monkey runs one kind of fault until stop is closed.
type monkey struct {
	mode     localpg.HAMode // the failover drill's cluster's
	rng      *rand.Rand
	faults   *faults
	progress func(format string, args ...any)
}

// sleep waits d, or returns false when the soak's chaos phase is over.
func sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	select {
	case <-stop:
		return false
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func (m *monkey) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(m.rng.Int64N(int64(hi-lo)))
}

// killProcesses SIGKILLs a random process of procs every lo-hi, as a
// crash or the OOM killer would, and restarts it after a pause, as a
// supervisor would. One at a time, so that some instance always serves.
func (m *monkey) killProcesses(ctx context.Context, stop <-chan struct{}, procs []*fleet.Process, lo, hi time.Duration, counter func(*faults)) {
	for sleep(ctx, stop, m.between(lo, hi)) {
		p := procs[m.rng.IntN(len(procs))]
		if err := p.Kill(); err != nil {
			m.faults.problem("kill %s: %v", p.Name, err)
			continue
		}
		m.faults.count(counter)
		down := m.between(0, time.Second)
		m.progress("SIGKILL %s; back in %s", p.Name, down.Round(time.Millisecond))
		time.Sleep(down)
		// The restart is not cut short by stop: every instance must be up
		// for the drain.
		m.restart(ctx, p)
	}
}

// restart starts p again, and again after a pause if it refuses to start,
// as a supervisor would: a process may rightly refuse for a moment, such
// as an api that finds the standby of a failover drill still catching up
// (db.Preflight's refusal of an asynchronous standby).
func (m *monkey) restart(ctx context.Context, p *fleet.Process) {
	const attempts, pause = 10, 2 * time.Second
	for attempt := 1; ; attempt++ {
		err := p.Restart(ctx)
		if err == nil {
			return
		}
		if attempt == attempts || ctx.Err() != nil {
			m.faults.problem("restart %s: %d attempts, the last: %v", p.Name, attempt, err)
			return
		}
		m.progress("%s did not start (%s); again in %s", p.Name, firstLine(err.Error()), pause)
		time.Sleep(pause)
	}
}

// restartPostgres restarts the cluster (fast mode: every connection cut,
// open transactions rolled back) at each offset from the start.
func (m *monkey) restartPostgres(ctx context.Context, stop <-chan struct{}, cluster localpg.Cluster, start time.Time, at []time.Duration) {
	for _, offset := range at {
		if !sleep(ctx, stop, time.Until(start.Add(offset))) {
			return
		}
		began := time.Now()
		m.progress("restarting Postgres")
		if err := cluster.Restart(ctx); err != nil {
			m.faults.problem("restart postgres: %v", err)
			continue
		}
		m.faults.count(func(f *faults) { f.pgRestarts++ })
		m.progress("Postgres is back after %s", time.Since(began).Round(time.Millisecond))
	}
}

// injectStripeFaults sets a random fault at the fake every lo-hi. The
// kinds come in shuffled rounds, so that even a short soak injects each.
func (m *monkey) injectStripeFaults(ctx context.Context, stop <-chan struct{}, fakeURL string, lo, hi time.Duration) {
	var round []int
	for sleep(ctx, stop, m.between(lo, hi)) {
		if len(round) == 0 {
			round = m.rng.Perm(3)
		}
		var (
			kind  string
			patch map[string]int
			n     int
		)
		next := round[0]
		round = round[1:]
		switch next {
		case 0:
			kind, n = FaultFailNext, 1+m.rng.IntN(3)
			status := []int{http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusTooManyRequests}[m.rng.IntN(3)]
			patch = map[string]int{"fail_next": n, "fail_status": status}
		case 1:
			kind, n = FaultDropAfterCommit, 1+m.rng.IntN(2)
			patch = map[string]int{"drop_after_commit_next": n}
		default:
			kind = FaultLatency
			patch = map[string]int{"latency_ms": 300 + m.rng.IntN(1200)}
		}
		if err := setFaults(ctx, fakeURL, patch); err != nil {
			m.faults.problem("inject %s: %v", kind, err)
			continue
		}
		m.faults.count(func(f *faults) { f.stripe[kind]++; f.stripeRequests[kind] += n })
		m.progress("Stripe fault %s", describe(patch))
		if kind == FaultLatency {
			sleep(ctx, stop, m.between(time.Second, 3*time.Second))
			if err := setFaults(ctx, fakeURL, map[string]int{"latency_ms": 0}); err != nil {
				m.faults.problem("clear latency: %v", err)
			}
		}
	}
}

// setFaults changes the fake's faults with POST /_fake/faults; nil clears
// them all.
func setFaults(ctx context.Context, fakeURL string, patch map[string]int) error {
	method, body := http.MethodDelete, []byte(nil)
	if patch != nil {
		method = http.MethodPost
		var err error
		if body, err = json.Marshal(patch); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, fakeURL+"/_fake/faults", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("set Stripe faults: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("set Stripe faults: status %d", resp.StatusCode)
	}
	return nil
}

// describe renders a faults patch as the JSON it is sent as.
func describe(patch map[string]int) string {
	b, err := json.Marshal(patch)
	if err != nil {
		return fmt.Sprint(patch)
	}
	return string(b)
}
