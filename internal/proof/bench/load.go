package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Load drives the api with a fixed number of concurrent clients, each
// sending its next request as soon as the last one is answered (a closed
// loop, as clients waiting on their answer behave).
type Load struct {
	Clients  int
	Warmup   time.Duration
	Duration time.Duration
	// Request builds client c's n-th request.
	Request func(c, n int) (*http.Request, error)
	// Check returns nil for a response that counts as a success.
	Check func(*http.Response, []byte) error
	// Stop, when closed, ends the measurement before Duration is up (the
	// reaper finished).
	Stop <-chan struct{}
	// OnSuccess, if set, is told about every success (to keep the keys of
	// finished rides for the replay step).
	OnSuccess func(c, n int)
}

// LoadResult is what a Load measured: completions between the end of the
// warm-up and the end of the measurement.
type LoadResult struct {
	Clients int
	Elapsed time.Duration
	OK      int
	Errors  int
	// ErrorKinds counts errors by status and problem code.
	ErrorKinds map[string]int
	Latency    Summary
	Rate       float64 // successes per second
	// Total counts every success, warm-up and tail included: the
	// denominator when the database's own counters are read around the
	// whole load.
	Total int
}

type sample struct {
	at      time.Time // completion
	latency time.Duration
	err     string // "" for a success
}

// Run runs the load and returns what it measured.
func (l Load) Run(ctx context.Context) (LoadResult, error) {
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        2 * l.Clients,
		MaxIdleConnsPerHost: l.Clients + 8,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 60 * time.Second}

	start := time.Now()
	from := start.Add(l.Warmup)
	deadline := from.Add(l.Duration)
	var (
		stopMu sync.Mutex
		stopAt time.Time
	)
	stopped := func() bool {
		stopMu.Lock()
		defer stopMu.Unlock()
		return !stopAt.IsZero()
	}
	if l.Stop != nil {
		watchDone := make(chan struct{})
		defer close(watchDone)
		go func() {
			select {
			case <-l.Stop:
				stopMu.Lock()
				stopAt = time.Now()
				stopMu.Unlock()
			case <-watchDone:
			}
		}()
	}

	samples := make([][]sample, l.Clients)
	var wg sync.WaitGroup
	for c := range l.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil && !stopped() && time.Now().Before(deadline); n++ {
				s := l.one(ctx, client, c, n)
				samples[c] = append(samples[c], s)
				if s.err == "" && l.OnSuccess != nil {
					l.OnSuccess(c, n)
				}
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return LoadResult{}, err
	}

	end := deadline
	stopMu.Lock()
	if !stopAt.IsZero() && stopAt.Before(end) {
		end = stopAt
	}
	stopMu.Unlock()
	res := LoadResult{Clients: l.Clients, Elapsed: end.Sub(from), ErrorKinds: map[string]int{}}
	var latencies []time.Duration
	for _, ss := range samples {
		for _, s := range ss {
			if s.err == "" {
				res.Total++
			}
			if s.at.Before(from) || s.at.After(end) {
				continue
			}
			if s.err != "" {
				res.Errors++
				res.ErrorKinds[s.err]++
				continue
			}
			res.OK++
			latencies = append(latencies, s.latency)
		}
	}
	res.Latency = Summarize(latencies)
	if res.Elapsed > 0 {
		res.Rate = float64(res.OK) / res.Elapsed.Seconds()
	}
	return res, nil
}

func (l Load) one(ctx context.Context, client *http.Client, c, n int) sample {
	req, err := l.Request(c, n)
	if err != nil {
		return sample{at: time.Now(), err: "build request: " + err.Error()}
	}
	req = req.WithContext(ctx)
	begin := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return sample{at: time.Now(), latency: time.Since(begin), err: "transport error"}
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	s := sample{at: time.Now(), latency: time.Since(begin)}
	switch {
	case err != nil:
		s.err = "read body"
	default:
		if cerr := l.Check(resp, body); cerr != nil {
			s.err = cerr.Error()
		}
	}
	return s
}

// statusError names an unexpected response by status and problem code.
func statusError(resp *http.Response, body []byte) error {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(body, &p)
	if p.Code != "" {
		return fmt.Errorf("HTTP %d %s", resp.StatusCode, p.Code)
	}
	return fmt.Errorf("HTTP %d", resp.StatusCode)
}

// errorNote summarises a result's errors for the table, most frequent
// first.
func errorNote(kinds map[string]int) string {
	labels := slices.Sorted(maps.Keys(kinds))
	slices.SortStableFunc(labels, func(a, b string) int { return kinds[b] - kinds[a] })
	var parts []string
	for i, k := range labels {
		if i == 2 {
			parts = append(parts, "...")
			break
		}
		parts = append(parts, fmt.Sprintf("%s x%d", k, kinds[k]))
	}
	return strings.Join(parts, ", ")
}
