package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Load drives the api with a fixed number of concurrent clients, each
// sending its next request as soon as the last one is answered (a closed
// loop, as clients waiting on their answer behave).
type Load struct {
	Clients          int
	Warmup, Duration time.Duration
	// Request builds client c's n-th request; Check returns nil for a
	// response that counts as a success.
	Request func(c, n int) (*http.Request, error)
	Check   func(*http.Response, []byte) error
	// Stop, when closed, ends the measurement before Duration is up (the
	// reaper finished).
	Stop <-chan struct{}
	// OnSuccess, if set, is told about every success.
	OnSuccess func(c, n int)
}

// LoadResult is what a Load measured: completions between the end of the
// warm-up and the end of the measurement.
type LoadResult struct {
	Clients, OK, Errors int
	// Total counts every success, warm-up and tail included: the
	// denominator when the database's counters are read around the load.
	Total      int
	ErrorKinds map[string]int // errors by status and problem code
	Latency    Summary
	Elapsed    time.Duration
	Rate       float64 // successes per second
}

type sample struct {
	at      time.Time // completion
	latency time.Duration
	err     string // "" for a success
}

// Run runs the load and returns what it measured.
func (l Load) Run(ctx context.Context) (LoadResult, error) {
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		MaxIdleConns: 2 * l.Clients, MaxIdleConnsPerHost: l.Clients + 8, DisableCompression: true}}
	defer client.CloseIdleConnections()
	from := time.Now().Add(l.Warmup)
	end := from.Add(l.Duration)
	var stopAt atomic.Pointer[time.Time]
	if l.Stop != nil {
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-l.Stop:
				now := time.Now()
				stopAt.Store(&now)
			case <-done:
			}
		}()
	}
	samples := make([][]sample, l.Clients)
	var wg sync.WaitGroup
	for c := range l.Clients {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil && stopAt.Load() == nil && time.Now().Before(end); n++ {
				s := l.one(ctx, client, c, n)
				samples[c] = append(samples[c], s)
				if s.err == "" && l.OnSuccess != nil {
					l.OnSuccess(c, n)
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return LoadResult{}, err
	}
	if at := stopAt.Load(); at != nil && at.Before(end) {
		end = *at
	}
	res := LoadResult{Clients: l.Clients, Elapsed: end.Sub(from), ErrorKinds: map[string]int{}}
	var latencies []time.Duration
	for _, s := range slices.Concat(samples...) {
		if s.err == "" {
			res.Total++
		}
		switch {
		case s.at.Before(from) || s.at.After(end):
		case s.err != "":
			res.Errors++
			res.ErrorKinds[s.err]++
		default:
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
	begin := time.Now()
	resp, err := client.Do(req.WithContext(ctx))
	if err != nil {
		return sample{at: time.Now(), latency: time.Since(begin), err: "transport error"}
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	s := sample{at: time.Now(), latency: time.Since(begin)}
	if err != nil {
		s.err = "read body"
	} else if err := l.Check(resp, body); err != nil {
		s.err = err.Error()
	}
	return s
}

// statusError names an unexpected response by status and problem code.
func statusError(resp *http.Response, body []byte) error {
	var p struct{ Code string }
	if json.Unmarshal(body, &p) == nil && p.Code != "" {
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

// Summary describes a set of request latencies.
type Summary struct {
	Count                    int
	Mean, P50, P90, P99, Max time.Duration
}

// Summarize sorts latencies in place and summarises them.
func Summarize(latencies []time.Duration) Summary {
	if len(latencies) == 0 {
		return Summary{}
	}
	slices.Sort(latencies)
	var total time.Duration
	for _, l := range latencies {
		total += l
	}
	return Summary{Count: len(latencies), Mean: total / time.Duration(len(latencies)),
		P50: Percentile(latencies, 50), P90: Percentile(latencies, 90), P99: Percentile(latencies, 99),
		Max: latencies[len(latencies)-1]}
}

// Percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method: the smallest value that at least p percent of the
// values are at or below, so that a p99 is always a latency that was
// observed, never an interpolation between two requests.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// ms renders a duration as fractional milliseconds, the unit of every
// latency in the report.
func ms(d time.Duration) float64 {
	return math.Round(float64(d.Microseconds())/10) / 100
}
