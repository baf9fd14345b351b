// Package simulator is a Rocket Rides client that keeps the API busy the way
// the original app's simulator does: a ride every few seconds as the demo
// user, each under a fresh idempotency key, about half of them asking the
// API to fail on purpose (raise_error=true) so that the failures have to
// be recovered.
//
// It retries through the client package (github.com/rocketrides/rocketrides/client),
// the project's one retry loop: every retry of a ride sends the identical
// request (the same Idempotency-Key, the same parameters, the same
// raise_error), an answer that may change is retried with capped
// exponential backoff and full jitter, never sooner than Retry-After, and
// a final answer is never retried.
//
// The failure a ride asked for is a final answer. A 500 internal_error in
// answer to a request that carried raise_error=true is the simulated
// failure: the ride was created, the charge was not made, and the key was
// unlocked at its recovery point. Retrying it would only fail again
// (raise_error is part of the identical request), and the API says so
// (Rocket-Rides-Should-Retry: false), so the simulator leaves the key
// alone and the completer finishes the ride, as it does for a client that
// went away. A ride whose retries run out is left to the completer the
// same way.
//
// With a journal (Config.Journal, a file under .data/ in make dev), each
// ride is written down before its first try and crossed out on a final
// answer, as an app's would be: a simulator killed mid-ride resumes the
// ride, with its key and bytes, when it starts again, before any new one.
package simulator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/rocketrides/rocketrides/client"
	"github.com/rocketrides/rocketrides/internal/platform/loop"
)

// DefaultTimeout bounds one attempt when Config.Client is nil. It is
// longer than the API's own Stripe timeout, so that an attempt normally
// ends with the API's answer rather than the client giving up on it; an
// attempt that does time out is retried with the same key.
const DefaultTimeout = 30 * time.Second

// simulateErrorParam asks the API to fail after the ride is created. The
// API accepts it only when it runs with SIMULATED_ERRORS=true.
const simulateErrorParam = "raise_error"

// Config configures a Simulator. URL and Token are required.
type Config struct {
	// URL is the API's base URL, such as http://127.0.0.1:5000.
	// Required.
	URL string
	// Token is the API token the rides are sent with. Required.
	Token string
	// ErrorRate is the share of rides, from 0 to 1, sent with
	// raise_error=true.
	ErrorRate float64
	// MaxPause spaces rides in Run by a random pause in [0, MaxPause).
	// Zero sends them back to back.
	MaxPause time.Duration
	// Rides is how many rides Run sends; zero means until its context
	// ends.
	Rides int
	// Client sends the requests; nil uses one with DefaultTimeout.
	Client *http.Client
	// Retry is the retry policy; its zero value is the default policy.
	Retry Policy
	// NewKey returns a fresh idempotency key; nil uses random UUIDs.
	NewKey func() string
	// Out receives one line per attempt; nil discards them.
	Out io.Writer
	// Journal is where each ride is written down before its first try
	// and crossed out on a final answer; Run resumes what it holds
	// before it sends a new ride. Nil: a ride killed with the simulator
	// is left to the completer.
	Journal client.Journal
}

func (c *Config) validate() error {
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("simulator: Config.URL must be an http or https URL such as http://127.0.0.1:5000, got %q", c.URL)
	}
	switch {
	case c.Token == "":
		return errors.New("simulator: Config.Token is required")
	case c.ErrorRate < 0 || c.ErrorRate > 1:
		return fmt.Errorf("simulator: Config.ErrorRate must be between 0 and 1, got %g", c.ErrorRate)
	case c.MaxPause < 0:
		return fmt.Errorf("simulator: Config.MaxPause must not be negative, got %s", c.MaxPause)
	case c.Rides < 0:
		return fmt.Errorf("simulator: Config.Rides must not be negative, got %d", c.Rides)
	case c.Retry.MaxAttempts < 0:
		return fmt.Errorf("simulator: Config.Retry.MaxAttempts must not be negative, got %d", c.Retry.MaxAttempts)
	case c.Retry.BaseDelay < 0:
		return fmt.Errorf("simulator: Config.Retry.BaseDelay must not be negative, got %s", c.Retry.BaseDelay)
	case c.Retry.MaxDelay < 0:
		return fmt.Errorf("simulator: Config.Retry.MaxDelay must not be negative, got %s", c.Retry.MaxDelay)
	}
	return nil
}

// Policy is the simulator's retry policy, which the client package
// follows: capped exponential backoff with full jitter, never sooner than
// Retry-After.
type Policy struct {
	// MaxAttempts counts the first attempt too; zero means 5.
	MaxAttempts int
	// BaseDelay is the backoff ceiling after the first attempt, doubled
	// after each further one; zero means 500ms.
	BaseDelay time.Duration
	// MaxDelay caps the backoff, and is the longest Retry-After the
	// simulator waits for: a server asking for longer does not park it,
	// the ride is left to the completer. Zero means 10s.
	MaxDelay time.Duration
	// Jitter draws a wait from [0, ceiling]; nil draws uniformly. Tests
	// fix it to make waits predictable.
	Jitter func(ceiling time.Duration) time.Duration
	// Sleep waits d or until ctx ends; nil uses a timer. Tests record the
	// waits instead of sleeping through them.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Policy defaults.
const (
	DefaultMaxAttempts = 5
	DefaultBaseDelay   = 500 * time.Millisecond
	DefaultMaxDelay    = 10 * time.Second
)

// Simulator sends rides to the API.
type Simulator struct {
	cfg  Config
	base string // the API's base URL, without a trailing slash

	mu sync.Mutex // serialises writes to cfg.Out
}

// New returns a Simulator for config.
func New(config *Config) (*Simulator, error) {
	if config == nil {
		return nil, errors.New("simulator: Config is required (URL and Token)")
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	cfg := *config
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: DefaultTimeout}
	}
	if cfg.NewKey == nil {
		cfg.NewKey = uuid.NewString
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	return &Simulator{cfg: cfg, base: strings.TrimSuffix(cfg.URL, "/")}, nil
}

// Ride is one ride request: its idempotency key and its parameters.
type Ride struct {
	Key                  string
	OriginLat, OriginLon float64
	TargetLat, TargetLon float64
	// RaiseError asks the API to fail the request on purpose.
	RaiseError bool
}

// San Francisco, and how far from it rides start and end, in degrees.
const (
	sfLat, sfLon         = 37.7749, -122.4194
	spreadLat, spreadLon = 0.08, 0.1
)

// NewRide returns a ride under a fresh key between two random points
// around San Francisco, asking for a simulated failure at the configured
// rate.
func (s *Simulator) NewRide() Ride {
	around := func(center, spread float64) float64 {
		// Six decimals (about 10 cm) keep the form values short.
		return math.Round((center+(rand.Float64()*2-1)*spread)*1e6) / 1e6
	}
	return Ride{
		Key:        s.cfg.NewKey(),
		OriginLat:  around(sfLat, spreadLat),
		OriginLon:  around(sfLon, spreadLon),
		TargetLat:  around(sfLat, spreadLat),
		TargetLon:  around(sfLon, spreadLon),
		RaiseError: rand.Float64() < s.cfg.ErrorRate,
	}
}

// params is r as the client package sends it: raise_error is a field the
// API accepts only with SIMULATED_ERRORS=true, beyond the contract.
func (r Ride) params() client.RideParams {
	p := client.RideParams{
		OriginLat: r.OriginLat, OriginLon: r.OriginLon, TargetLat: r.TargetLat, TargetLon: r.TargetLon,
		IdempotencyKey: r.Key,
	}
	if r.RaiseError {
		p.Extra = url.Values{simulateErrorParam: {"true"}}
	}
	return p
}

// Result is what became of an attempt.
type Result string

// Results.
const (
	// Succeeded: a 2xx; the ride is created and charged.
	Succeeded Result = "succeeded"
	// SimulatedFailure: the failure the ride asked for, left for the
	// completer.
	SimulatedFailure Result = "simulated_failure"
	// Failed: a final error answer, such as a declined card or a request
	// the API rejects; retrying would get the same answer.
	Failed Result = "failed"
	// Retrying: the attempt failed in a way a retry may fix, and another
	// attempt follows after Wait.
	Retrying Result = "retrying"
	// GaveUp: the attempts ran out, or the simulator is stopping, before
	// a final answer; the key is left for the completer.
	GaveUp Result = "gave_up"
)

// Outcome is one attempt at a ride, or with Send, the last attempt.
type Outcome struct {
	Key        string
	Attempt    int
	RaiseError bool
	// Resumed is set for a ride an earlier run left in the journal.
	Resumed bool
	// Status is the HTTP status; zero when no response arrived (Err).
	Status int
	// RideID and ChargeID are read from a 2xx ride.
	RideID   int64
	ChargeID string
	// Code is the problem document's code of an error response.
	Code string
	// Replayed is set when the API replayed a stored response.
	Replayed bool
	// RetryAfter is the server's Retry-After, zero when absent.
	RetryAfter time.Duration
	// Err is the network error (connection refused, timeout, ...) that
	// kept a response from arriving.
	Err     error
	Latency time.Duration
	Result  Result
	// Wait is how long the simulator waits before the next attempt.
	Wait time.Duration
}

// Simulated reports whether the outcome is the failure the request asked
// for with raise_error: the API answers it with a 500 internal_error. A
// genuine 500 on such a request cannot be told apart from it, and needs
// the same treatment anyway: the key is unlocked at its recovery point,
// for a retry or the completer.
func (o Outcome) Simulated() bool {
	return o.RaiseError && o.Status == http.StatusInternalServerError && o.Code == "internal_error"
}

// String is the outcome as one logfmt line.
func (o Outcome) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "key=%s attempt=%d", o.Key, o.Attempt)
	if o.Resumed {
		b.WriteString(" resumed=true")
	}
	if o.Err != nil {
		fmt.Fprintf(&b, " error=%s", strconv.Quote(o.Err.Error()))
	} else {
		fmt.Fprintf(&b, " status=%d", o.Status)
	}
	if o.RideID != 0 {
		fmt.Fprintf(&b, " ride=%d", o.RideID)
	}
	if o.ChargeID != "" {
		fmt.Fprintf(&b, " charge=%s", o.ChargeID)
	}
	if o.Code != "" {
		fmt.Fprintf(&b, " code=%s", o.Code)
	}
	if o.RaiseError {
		b.WriteString(" raise_error=true")
	}
	if o.Replayed {
		b.WriteString(" replayed=true")
	}
	fmt.Fprintf(&b, " latency=%.1fms result=%s", float64(o.Latency)/float64(time.Millisecond), o.Result)
	switch o.Result {
	case Retrying:
		fmt.Fprintf(&b, " wait=%s", o.Wait.Round(time.Millisecond))
	case SimulatedFailure, GaveUp:
		b.WriteString(" next=completer")
	}
	return b.String()
}

// Send sends a new random ride (NewRide) until it gets a final answer or
// gives up, and returns the last attempt's outcome.
func (s *Simulator) Send(ctx context.Context) Outcome {
	return s.SendRide(ctx, s.NewRide())
}

// SendRide sends r, retrying it by the retry policy, and returns the last
// attempt's outcome. Every attempt is written to Config.Out.
func (s *Simulator) SendRide(ctx context.Context, r Ride) Outcome {
	return s.send(r, false, func(c *client.Client) error {
		_, err := c.CreateRide(ctx, r.params())
		return err
	})
}

// resume sends again a ride an earlier run wrote down in the journal,
// with its key and bytes.
func (s *Simulator) resume(ctx context.Context, p client.PendingRide) Outcome {
	form, _ := url.ParseQuery(p.Body) // the simulator's own form; a field it cannot read is only not shown
	r := Ride{Key: p.IdempotencyKey, RaiseError: form.Get(simulateErrorParam) == "true"}
	return s.send(r, true, func(c *client.Client) error {
		_, err := c.ResumeRide(ctx, p)
		return err
	})
}

// send has the client package send ride r (create or resume), reporting
// every attempt, and returns the last attempt's outcome.
func (s *Simulator) send(r Ride, resumed bool, create func(*client.Client) error) Outcome {
	var last Outcome
	p := s.cfg.Retry
	c, err := client.New(&client.Config{
		URL: s.base, Token: s.cfg.Token, HTTPClient: s.cfg.Client, AttemptTimeout: s.cfg.Client.Timeout,
		MaxAttempts: cmp.Or(p.MaxAttempts, DefaultMaxAttempts),
		BaseDelay:   cmp.Or(p.BaseDelay, DefaultBaseDelay),
		MaxDelay:    cmp.Or(p.MaxDelay, DefaultMaxDelay),
		Jitter:      p.Jitter, Sleep: p.Sleep,
		UserAgent: "rocketrides-simulator",
		Journal:   s.cfg.Journal,
		OnAttempt: func(a client.Attempt) {
			last = outcome(r, a)
			last.Resumed = resumed
			s.report(last)
		},
	})
	if err == nil {
		// Every attempt's outcome is in last: an error matters here
		// only when no attempt was made.
		err = create(c)
	}
	if last.Attempt == 0 {
		// New validated the same URL and token already: the journal
		// refused the ride, or it was too old to resume.
		last = Outcome{Key: r.Key, RaiseError: r.RaiseError, Resumed: resumed, Attempt: 1, Err: err, Result: GaveUp}
		s.report(last)
		return last
	}
	if last.Result == Retrying {
		// Stopping between two attempts: the key is left as it is, for
		// the completer.
		last.Result, last.Wait = GaveUp, 0
	}
	return last
}

// outcome is what the simulator makes of one of the client's attempts at
// ride r.
func outcome(r Ride, a client.Attempt) Outcome {
	o := Outcome{
		Key: r.Key, Attempt: a.N, RaiseError: r.RaiseError, Status: a.Status, Code: a.Code,
		Replayed: a.Replayed, RetryAfter: a.RetryAfter, Err: a.Err, Latency: a.Latency, Wait: a.Wait,
	}
	if a.Err == nil && a.Status < 300 {
		// A ride; a body that is not one (a proxy's page, say) leaves
		// the fields empty and the status decides.
		var ride struct {
			ID             int64  `json:"id"`
			StripeChargeID string `json:"stripe_charge_id"`
		}
		if json.Unmarshal(a.Body, &ride) == nil {
			o.RideID, o.ChargeID = ride.ID, ride.StripeChargeID
		}
	}
	switch {
	case a.Retry:
		o.Result = Retrying
	case a.Final && a.Status >= 200 && a.Status < 300:
		o.Result = Succeeded
	case a.Final && o.Simulated():
		o.Result = SimulatedFailure
	case a.Final:
		o.Result = Failed
	default:
		o.Result = GaveUp
	}
	return o
}

func (s *Simulator) report(o Outcome) { s.say("%s", o) }

// say writes one line to Config.Out.
func (s *Simulator) say(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = fmt.Fprintf(s.cfg.Out, format+"\n", args...)
}

// maxBody bounds how much of a /healthz answer is read.
const maxBody = 1 << 20

// Tally counts what became of the rides Run sent.
type Tally struct {
	// Resumed are the rides an earlier run left pending in the journal;
	// Sent the new ones. The outcomes count both.
	Resumed, Sent                                int
	Succeeded, SimulatedFailures, Failed, GaveUp int
}

func (t Tally) String() string {
	return fmt.Sprintf("resumed=%d sent=%d succeeded=%d simulated_failures=%d failed=%d gave_up=%d",
		t.Resumed, t.Sent, t.Succeeded, t.SimulatedFailures, t.Failed, t.GaveUp)
}

// Run sends rides one at a time, a random pause apart, until it has sent
// Config.Rides of them or ctx ends. Ending ctx abandons the attempt in
// flight: the API unlocks the key at its recovery point and the completer
// finishes the ride.
func (s *Simulator) Run(ctx context.Context) Tally {
	var t Tally
	// The rides an earlier run was killed in, before any new one.
	var pending []client.PendingRide
	if s.cfg.Journal != nil {
		var err error
		if pending, err = s.cfg.Journal.Pending(); err != nil {
			s.say("journal error=%s", strconv.Quote(err.Error()))
		}
	}
	for _, p := range pending {
		if ctx.Err() != nil {
			return t
		}
		t.Resumed++
		t.count(s.resume(ctx, p))
	}
	for s.cfg.Rides == 0 || t.Sent < s.cfg.Rides {
		if t.Sent > 0 && s.cfg.MaxPause > 0 {
			if loop.Sleep(ctx, rand.N(s.cfg.MaxPause)) != nil {
				return t
			}
		}
		if ctx.Err() != nil {
			return t
		}
		t.Sent++
		t.count(s.Send(ctx))
	}
	return t
}

// count adds what became of a ride.
func (t *Tally) count(o Outcome) {
	switch o.Result {
	case Succeeded:
		t.Succeeded++
	case SimulatedFailure:
		t.SimulatedFailures++
	case Failed:
		t.Failed++
	default:
		t.GaveUp++
	}
}

// WaitReady polls the API's /healthz until it answers 200 or timeout
// passes, so that a simulator started alongside the API does not spend
// its first rides on connection errors.
func (s *Simulator) WaitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	healthz := s.base + "/healthz"
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, healthz, nil)
		if err != nil {
			return fmt.Errorf("wait for %s: %w", healthz, err)
		}
		resp, err := s.cfg.Client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		if ctx.Err() == nil {
			last = err
		}
		if loop.Sleep(ctx, 250*time.Millisecond) != nil {
			if last == nil {
				last = ctx.Err()
			}
			return fmt.Errorf("API at %s not ready after %s: %w", healthz, timeout, last)
		}
	}
}
