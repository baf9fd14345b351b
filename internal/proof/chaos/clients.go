package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// rideParams is a ride from San Francisco to Oakland, as a form.
const rideParams = "origin_lat=37.7749&origin_lon=-122.4194&target_lat=37.8044&target_lon=-122.2712"

// Client retry policy: exponential backoff with full jitter, bounded, as
// a well-behaved client retries. A key the client gives up on is left to
// the completers, as a phone that went flat leaves its request.
const (
	clientTimeout  = 10 * time.Second
	minBackoff     = 100 * time.Millisecond
	maxBackoff     = 2 * time.Second
	maxAttempts    = 30
	declinedShare  = 0.1 // of the keys, sent by the user whose card is declined
	networkErrKind = "network error"
)

// traffic is what the clients did, shared by all of them.
type traffic struct {
	mu        sync.Mutex
	requests  int
	answers   map[string]int // "201", "409", "503", "network error", ...
	keys      int
	final     map[string]int // the answer each key ended with
	abandoned int            // keys the client gave up on
	odd       []string       // answers no correct server gives

	// acknowledged holds every key whose client got a 2xx (or its final
	// 402), with the charge the 201 named: the failover drill checks that
	// each is still in the database and that no charge was handed to two
	// keys.
	acknowledged map[string]ack
	// created are the times of the 201s, to time a failover.
	created []time.Time
}

// ack is what a client was told about its key.
type ack struct {
	status   int
	chargeID string
}

func newTraffic() *traffic {
	return &traffic{answers: map[string]int{}, final: map[string]int{}, acknowledged: map[string]ack{}}
}

// acknowledge records a final answer the client received.
func (tr *traffic) acknowledge(key string, status int, body []byte) {
	var ride struct {
		StripeChargeID *string `json:"stripe_charge_id"`
	}
	a := ack{status: status}
	if status == http.StatusCreated && json.Unmarshal(body, &ride) == nil && ride.StripeChargeID != nil {
		a.chargeID = *ride.StripeChargeID
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.acknowledged[key] = a
	if status == http.StatusCreated {
		tr.created = append(tr.created, time.Now())
	}
}

// firstCreatedAfter is the time of the first 201 after t, or zero.
func (tr *traffic) firstCreatedAfter(t time.Time) time.Time {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, c := range tr.created {
		if c.After(t) {
			return c
		}
	}
	return time.Time{}
}

// createdBetween counts the 201s received between from and to.
func (tr *traffic) createdBetween(from, to time.Time) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, c := range tr.created {
		if c.After(from) && c.Before(to) {
			n++
		}
	}
	return n
}

// answerCounts is a copy of the answers so far, by status.
func (tr *traffic) answerCounts() map[string]int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return maps.Clone(tr.answers)
}

// diffCounts is after minus before, without the zeros.
func diffCounts(after, before map[string]int) map[string]int {
	d := map[string]int{}
	for k, n := range after {
		if n-before[k] != 0 {
			d[k] = n - before[k]
		}
	}
	return d
}

func (tr *traffic) record(answer string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.requests++
	tr.answers[answer]++
}

func (tr *traffic) finish(answer string, gaveUp bool, odd string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.keys++
	if gaveUp {
		tr.abandoned++
	} else {
		tr.final[answer]++
	}
	if odd != "" && len(tr.odd) < 20 {
		tr.odd = append(tr.odd, odd)
	}
}

// rider is one client: it posts rides with fresh keys, one at a time,
// retrying each with the same key until it gets a final answer.
type rider struct {
	http     *http.Client
	apis     []string // base URLs, one per api instance
	token    string
	badToken string
	rng      *rand.Rand
	traffic  *traffic
}

// run posts rides until stop is closed, then finishes the key in hand.
// ctx ends everything at once (an interrupted soak).
func (r *rider) run(ctx context.Context, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		token := r.token
		if r.rng.Float64() < declinedShare {
			token = r.badToken
		}
		r.ride(ctx, token, uuid.NewString())
	}
}

// ride drives one key to a final answer: 201, or 402 for the declined
// card. 409 (another attempt holds the key), 5xx and network errors are
// retried with the same key, against any instance.
func (r *rider) ride(ctx context.Context, token, key string) {
	for attempt := 1; ; attempt++ {
		status, replayed, body, err := r.post(ctx, r.apis[r.rng.IntN(len(r.apis))], token, key)
		answer := strconv.Itoa(status)
		if err != nil {
			answer = networkErrKind
		}
		// A replayed answer means another attempt, or a completer,
		// finished the request this client was waiting for.
		if replayed {
			r.traffic.record(answer + " replayed")
		} else {
			r.traffic.record(answer)
		}
		switch {
		case ctx.Err() != nil:
			return
		case err == nil && (status == http.StatusCreated || status == http.StatusPaymentRequired):
			r.traffic.acknowledge(key, status, body)
			r.traffic.finish(answer, false, "")
			return
		case err == nil && status != http.StatusConflict && status != http.StatusRequestTimeout && status < 500,
			// 502 is final too: a stored rejection or a charge set
			// aside for a human. Neither should happen to these rides.
			err == nil && status == http.StatusBadGateway:
			r.traffic.finish(answer, false, "key "+key+" answered "+answer)
			return
		case attempt == maxAttempts:
			r.traffic.finish(answer, true, "")
			return
		}
		backoff := min(maxBackoff, minBackoff<<min(attempt-1, 10))
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(r.rng.Int64N(int64(backoff))) + 10*time.Millisecond):
		}
	}
}

func (r *rider) post(ctx context.Context, baseURL, token, key string) (status int, replayed bool, body []byte, err error) {
	ctx, cancel := context.WithTimeout(ctx, clientTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/rides", strings.NewReader(rideParams))
	if err != nil {
		return 0, false, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := r.http.Do(req)
	if err != nil {
		return 0, false, nil, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		// The api died mid-answer: as good as no answer.
		return 0, false, nil, fmt.Errorf("read answer: %w", err)
	}
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", body, nil
}
