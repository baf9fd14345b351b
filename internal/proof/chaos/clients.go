package chaos

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/rocketrides/rocketrides/client"
)

// ride is a ride from San Francisco to Oakland.
var ride = client.RideParams{OriginLat: 37.7749, OriginLon: -122.4194, TargetLat: 37.8044, TargetLon: -122.2712}

// Client retry policy: exponential backoff with full jitter, bounded, as
// a well-behaved client retries (the client package's). A key the client
// gives up on is left to the completers, as a phone that went flat
// leaves its request.
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
	// written are the times of the 201s that were not replays, in order:
	// each is a request whose last phase just committed, so they time
	// when writes went on and when they stopped.
	written []time.Time
}

// ack is what a client was told about its key.
type ack struct {
	status   int
	chargeID string
}

func newTraffic() *traffic {
	return &traffic{answers: map[string]int{}, final: map[string]int{}, acknowledged: map[string]ack{}}
}

// acknowledge records a final answer the client received, with the
// charge a 201 named.
func (tr *traffic) acknowledge(key string, status int, chargeID string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.acknowledged[key] = ack{status: status, chargeID: chargeID}
}

// firstCreatedAfter is the time of the first 201, not a replay, after t,
// or zero.
func (tr *traffic) firstCreatedAfter(t time.Time) time.Time {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, c := range tr.written {
		if c.After(t) {
			return c
		}
	}
	return time.Time{}
}

// createdBetween counts the 201s, not replays, received between from
// and to.
func (tr *traffic) createdBetween(from, to time.Time) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, c := range tr.written {
		if c.After(from) && c.Before(to) {
			n++
		}
	}
	return n
}

// writes is a copy of written.
func (tr *traffic) writes() []time.Time {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.written)
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

// record counts an answer: a status, the status and " replayed", or a
// network error.
func (tr *traffic) record(answer string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.requests++
	tr.answers[answer]++
	if answer == strconv.Itoa(http.StatusCreated) {
		tr.written = append(tr.written, time.Now())
	}
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
// card, through the client package, which retries 409, 5xx and network
// errors with the same key. Each try goes to any instance.
func (r *rider) ride(ctx context.Context, token, key string) {
	var last string
	c, err := client.New(&client.Config{
		URL: r.apis[0], Token: token, AttemptTimeout: clientTimeout,
		HTTPClient:  &http.Client{Transport: spread{apis: r.apis, rng: r.rng, next: r.http.Transport}},
		MaxAttempts: maxAttempts, BaseDelay: minBackoff, MaxDelay: maxBackoff,
		Jitter: func(ceiling time.Duration) time.Duration { return time.Duration(r.rng.Int64N(int64(ceiling) + 1)) },
		OnAttempt: func(a client.Attempt) {
			last = strconv.Itoa(a.Status)
			if a.Err != nil {
				last = networkErrKind
			}
			// A replayed answer means another attempt, or a completer,
			// finished the request this client was waiting for.
			if a.Replayed {
				r.traffic.record(last + " replayed")
			} else {
				r.traffic.record(last)
			}
		},
	})
	if err != nil {
		panic(err) // the soak's own URLs and tokens
	}
	p := ride
	p.IdempotencyKey = key
	created, err := c.CreateRide(ctx, p)
	var prob *client.Error
	switch {
	case ctx.Err() != nil:
	case err == nil:
		r.traffic.acknowledge(key, http.StatusCreated, created.StripeChargeID)
		r.traffic.finish(last, false, "")
	case errors.As(err, &prob) && prob.Final && prob.Status == http.StatusPaymentRequired:
		r.traffic.acknowledge(key, prob.Status, "")
		r.traffic.finish(last, false, "")
	case errors.As(err, &prob) && prob.Final:
		// A 502 is final too: a stored rejection or a charge set aside
		// for a human. Neither, nor any other final error, should
		// happen to these rides.
		r.traffic.finish(last, false, "key "+key+" answered "+last)
	default:
		r.traffic.finish(last, true, "")
	}
}

// spread sends each try to one of the api instances, drawn at random, as
// a load balancer in front of them would.
type spread struct {
	apis []string // base URLs
	rng  *rand.Rand
	next http.RoundTripper
}

func (s spread) RoundTrip(req *http.Request) (*http.Response, error) {
	u, err := url.Parse(s.apis[s.rng.IntN(len(s.apis))])
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	req.URL.Scheme, req.URL.Host, req.Host = u.Scheme, u.Host, ""
	return s.next.RoundTrip(req)
}
