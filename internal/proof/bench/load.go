package bench

import (
	"cmp"
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
	// Rate, when set, paces the clients to about Rate requests a second
	// together, each waiting out its share between requests: two servers
	// compared at one rate do the same work per second.
	Rate float64
}

// LoadResult is what a Load measured: completions between the end of the
// warm-up and the end of the measurement.
type LoadResult struct {
	Clients, OK, Errors int
	ErrorKinds          map[string]int // errors by status and problem code
	P50, P99            time.Duration
	Elapsed             time.Duration
	Rate                float64 // successes per second
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
	stopped := func() bool {
		select {
		case <-l.Stop: // a nil Stop never is
			stopAt.CompareAndSwap(nil, new(time.Now()))
			return true
		default:
			return false
		}
	}
	samples := make([][]sample, l.Clients)
	var wg sync.WaitGroup
	var every time.Duration
	if l.Rate > 0 {
		every = time.Duration(float64(l.Clients) / l.Rate * float64(time.Second))
	}
	for c := range l.Clients {
		wg.Go(func() {
			next := time.Now()
			for n := 0; ctx.Err() == nil && !stopped() && time.Now().Before(end); n++ {
				if every > 0 {
					next = next.Add(every)
					time.Sleep(time.Until(next))
				}
				samples[c] = append(samples[c], l.one(ctx, client, c, n))
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
	slices.Sort(latencies)
	res.P50, res.P99 = Percentile(latencies, 50), Percentile(latencies, 99)
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
	labels := slices.SortedFunc(maps.Keys(kinds), func(a, b string) int { return cmp.Or(kinds[b]-kinds[a], strings.Compare(a, b)) })
	for i, k := range labels {
		labels[i] = fmt.Sprintf("%s x%d", k, kinds[k])
	}
	if len(labels) > 2 {
		labels = append(labels[:2], "...")
	}
	return strings.Join(labels, ", ")
}

// Percentile returns the p-th percentile of sorted by the nearest-rank
// method, the smallest value with at least p percent of the values at or
// below it: a p99 is always a latency that was observed.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// ms is d in milliseconds, the unit of every latency in the report.
func ms(d time.Duration) float64 {
	return math.Round(float64(d.Microseconds())/10) / 100
}
