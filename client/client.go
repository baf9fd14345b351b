package client

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Defaults of Config's zero fields.
const (
	// DefaultMaxAttempts is how many tries a request gets, the first
	// included.
	DefaultMaxAttempts = 5
	// DefaultBaseDelay is the backoff's ceiling before the first retry,
	// as the contract gives it; it doubles before each further one.
	DefaultBaseDelay = 500 * time.Millisecond
	// DefaultMaxDelay caps the backoff, as the contract does, and is the
	// longest Retry-After the client waits for.
	DefaultMaxDelay = 30 * time.Second
	// DefaultAttemptTimeout bounds one try: longer than the API's own
	// wait for its payment provider, so that a try normally ends with the
	// API's answer rather than the client giving up on it.
	DefaultAttemptTimeout = 30 * time.Second
)

// UntilDeadline as Config.MaxAttempts leaves the number of tries to the
// context's deadline alone.
const UntilDeadline = math.MaxInt

// Config configures a Client. URL and Token are required; every other
// zero field gets its documented default.
type Config struct {
	// URL is the API's base URL, such as http://127.0.0.1:5000.
	// Required.
	URL string
	// Token is the API token, sent as a bearer token. Required.
	Token string
	// HTTPClient sends the tries; nil uses a client of the package's own.
	// Its Transport decides where a try goes: one that spreads tries over
	// several instances behaves as a load balancer would.
	HTTPClient *http.Client
	// AttemptTimeout bounds one try, its answer's body included; zero
	// means DefaultAttemptTimeout. A try that runs out is retried.
	AttemptTimeout time.Duration
	// MaxAttempts is how many tries a request gets, the first included;
	// zero means DefaultMaxAttempts, UntilDeadline leaves it to the
	// context.
	MaxAttempts int
	// BaseDelay is the backoff's ceiling before the first retry; zero
	// means DefaultBaseDelay.
	BaseDelay time.Duration
	// MaxDelay caps the backoff's ceiling, and is the longest Retry-After
	// the client waits for: an answer asking for a longer wait ends the
	// request (it is returned, not retried early). Zero means
	// DefaultMaxDelay.
	MaxDelay time.Duration
	// OnAttempt, when set, is called after every try, with what it got
	// and what the client does next. It runs on the request's goroutine:
	// it must not block.
	OnAttempt func(Attempt)
	// UserAgent is sent with every try; empty sends DefaultUserAgent.
	UserAgent string
	// Jitter draws the backoff's wait from [0, ceiling]; nil draws it
	// uniformly (full jitter). Tests fix it to make waits predictable.
	Jitter func(ceiling time.Duration) time.Duration
	// Sleep waits d, or until ctx ends, between two tries; nil uses a
	// timer. Tests record the waits instead of sleeping through them.
	Sleep func(ctx context.Context, d time.Duration) error
	// Journal is where CreateRide writes a ride down before its first
	// try and crosses it out on a final answer, so that an app killed
	// meanwhile resumes it when it starts again (PendingRides,
	// ResumeRide). Nil keeps a ride in memory only: it dies with the
	// process, and the next tap is a second ride.
	Journal Journal
}

// DefaultUserAgent is the User-Agent a Client sends unless told otherwise.
const DefaultUserAgent = "rocketrides-go"

func (c *Config) validate() error {
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("client: Config.URL must be an http or https URL such as http://127.0.0.1:5000, got %q", c.URL)
	}
	switch {
	case c.Token == "":
		return errors.New("client: Config.Token is required")
	case c.AttemptTimeout < 0:
		return fmt.Errorf("client: Config.AttemptTimeout must not be negative, got %s", c.AttemptTimeout)
	case c.MaxAttempts < 0:
		return fmt.Errorf("client: Config.MaxAttempts must not be negative, got %d", c.MaxAttempts)
	case c.BaseDelay < 0:
		return fmt.Errorf("client: Config.BaseDelay must not be negative, got %s", c.BaseDelay)
	case c.MaxDelay < 0:
		return fmt.Errorf("client: Config.MaxDelay must not be negative, got %s", c.MaxDelay)
	}
	return nil
}

// Client talks to the API. It is safe for concurrent use.
type Client struct {
	cfg  Config
	base string // URL without a trailing slash
}

// New returns a Client for config.
func New(config *Config) (*Client, error) {
	if config == nil {
		return nil, errors.New("client: Config is required (URL and Token)")
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	cfg := *config
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.AttemptTimeout == 0 {
		cfg.AttemptTimeout = DefaultAttemptTimeout
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.BaseDelay == 0 {
		cfg.BaseDelay = DefaultBaseDelay
	}
	if cfg.MaxDelay == 0 {
		cfg.MaxDelay = DefaultMaxDelay
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = DefaultUserAgent
	}
	if cfg.Jitter == nil {
		cfg.Jitter = fullJitter
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	return &Client{cfg: cfg, base: strings.TrimSuffix(cfg.URL, "/")}, nil
}

// NewKey returns a fresh idempotency key: a random (version 4) UUID.
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// RideParams is a ride request: where from, where to, and the key that
// names it.
type RideParams struct {
	// OriginLat, OriginLon, TargetLat and TargetLon are in decimal
	// degrees.
	OriginLat, OriginLon, TargetLat, TargetLon float64
	// IdempotencyKey names the request; every try sends it. Empty: the
	// client makes one (NewKey). Give one to resume a request an earlier
	// process started, and a new one for every new ride.
	IdempotencyKey string
	// Extra are further form fields sent with the parameters, for a
	// server that accepts more than the contract does (a development
	// server's raise_error). They are part of the request: every try
	// sends them too.
	Extra url.Values
}

func (p RideParams) form() string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	v := url.Values{}
	for name, values := range p.Extra {
		v[name] = append([]string(nil), values...)
	}
	v.Set("origin_lat", f(p.OriginLat))
	v.Set("origin_lon", f(p.OriginLon))
	v.Set("target_lat", f(p.TargetLat))
	v.Set("target_lon", f(p.TargetLon))
	return v.Encode()
}

// Status is where a ride stands.
type Status string

// Ride statuses (docs/openapi.yaml, RideStatus).
const (
	// Pending: created; its charge is not settled yet. Poll the ride.
	Pending Status = "pending"
	// Succeeded: charged. Final.
	Succeeded Status = "succeeded"
	// Declined: the card was declined. Final.
	Declined Status = "declined"
	// Failed: the payment provider rejected the charge. Final.
	Failed Status = "failed"
	// NeedsReview: a person is settling the charge. Poll the ride.
	NeedsReview Status = "needs_review"
)

// Final reports whether the status never changes again.
func (s Status) Final() bool {
	return s == Succeeded || s == Declined || s == Failed
}

// Ride is a ride as the API answers it.
type Ride struct {
	ID        int64     `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	Status    Status    `json:"status"`
	OriginLat float64   `json:"origin_lat"`
	OriginLon float64   `json:"origin_lon"`
	TargetLat float64   `json:"target_lat"`
	TargetLon float64   `json:"target_lon"`
	// Amount is in the currency's smallest unit (cents).
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// StripeChargeID is set when Status is Succeeded, empty otherwise.
	StripeChargeID string `json:"stripe_charge_id"`
	// Replayed is set when the answer was the stored answer of an
	// earlier try with the same key (Idempotent-Replayed: true): nothing
	// ran again.
	Replayed bool `json:"-"`
}

// CreateRide requests a ride and pays for it, retrying as the contract
// says until an answer is final, the tries run out or ctx ends. It
// returns the ride (Status Succeeded, or Pending when the server finished
// the request elsewhere and the ride's charge is not settled yet), or an
// error: an *Error for a problem answer, whose Final says whether a retry
// with the same key could still change it, or the last try's network
// error when none was answered.
//
// With a Config.Journal, the ride is written down before its first try
// (a ride the journal cannot record is not sent) and crossed out on a
// final answer; giving up leaves it there, for ResumeRide. A journal
// that cannot cross a ride out does not lose its answer: CreateRide
// returns the answer with the journal's error joined to it, and the ride,
// still pending, replays the same answer when it is resumed.
func (c *Client) CreateRide(ctx context.Context, p RideParams) (*Ride, error) {
	r := PendingRide{IdempotencyKey: p.IdempotencyKey, Body: p.form(), Recorded: time.Now().UTC()}
	if r.IdempotencyKey == "" {
		r.IdempotencyKey = NewKey()
	}
	if c.cfg.Journal != nil {
		if err := c.cfg.Journal.Add(r); err != nil {
			return nil, fmt.Errorf("client: POST /rides with key %s: not sent, the journal cannot record it: %w", r.IdempotencyKey, err)
		}
	}
	return c.sendRide(ctx, r)
}

// PendingRides lists the rides the journal holds, oldest first: rides an
// earlier process wrote down and got no final answer for. An app resumes
// each (ResumeRide) when it starts, before it offers a new ride. Without
// a Config.Journal there are none.
func (c *Client) PendingRides() ([]PendingRide, error) {
	if c.cfg.Journal == nil {
		return nil, nil
	}
	rides, err := c.cfg.Journal.Pending()
	if err != nil {
		return nil, fmt.Errorf("client: list the pending rides: %w", err)
	}
	return rides, nil
}

// ErrTooOldToResume is ResumeRide's error for a ride recorded longer
// than MaxResumeAge ago: it is crossed out unsent, and the rider's rides
// (ListRides) tell what became of it.
var ErrTooOldToResume = errors.New("client: the pending ride is too old to resume")

// ResumeRide sends a pending ride again, with its key and the bytes it
// was first sent with, and returns as CreateRide does: the journal
// crosses it out on a final answer and keeps it otherwise.
func (c *Client) ResumeRide(ctx context.Context, r PendingRide) (*Ride, error) {
	if time.Since(r.Recorded) > MaxResumeAge {
		return nil, c.crossOut(r.IdempotencyKey,
			fmt.Errorf("%w: key %s, recorded %s", ErrTooOldToResume, r.IdempotencyKey, r.Recorded.Format(time.RFC3339)))
	}
	return c.sendRide(ctx, r)
}

// sendRide sends r's tries, and crosses r out of the journal on a final
// answer.
func (c *Client) sendRide(ctx context.Context, r PendingRide) (*Ride, error) {
	ans, err := c.do(ctx, exchange{
		method: http.MethodPost, path: "/rides", key: r.IdempotencyKey,
		body: []byte(r.Body), contentType: "application/x-www-form-urlencoded",
	})
	var prob *Error
	switch {
	case err == nil:
		ride, err := decodeRide(ans)
		return ride, c.crossOut(r.IdempotencyKey, err)
	case errors.As(err, &prob) && prob.Final:
		return nil, c.crossOut(r.IdempotencyKey, err)
	case errors.As(err, &prob):
		return nil, err
	}
	return nil, &NoAnswerError{IdempotencyKey: r.IdempotencyKey, Err: err}
}

// crossOut removes the ride with key from the journal, if there is one,
// and returns err, with the journal's own error joined to it when it
// fails.
func (c *Client) crossOut(key string, err error) error {
	if c.cfg.Journal == nil {
		return err
	}
	if jerr := c.cfg.Journal.Remove(key); jerr != nil {
		return errors.Join(err, fmt.Errorf("client: the answer to key %s is final, but the journal still lists it: %w", key, jerr))
	}
	return err
}

// NoAnswerError is CreateRide's error when no try was answered: the
// request may have run or not. IdempotencyKey is the key every try sent,
// the one a later retry of the same ride must send again (the client
// made it when the caller gave none). Err is the last try's error.
type NoAnswerError struct {
	IdempotencyKey string
	Err            error
}

func (e *NoAnswerError) Error() string {
	return fmt.Sprintf("client: POST /rides with key %s: no answer: %v", e.IdempotencyKey, e.Err)
}

func (e *NoAnswerError) Unwrap() error { return e.Err }

// GetRide returns one of the caller's rides. A GET changes nothing, so
// it is retried like a ride request, without a key.
func (c *Client) GetRide(ctx context.Context, id int64) (*Ride, error) {
	ans, err := c.do(ctx, exchange{method: http.MethodGet, path: "/rides/" + strconv.FormatInt(id, 10)})
	if err != nil {
		return nil, err
	}
	return decodeRide(ans)
}

// ListParams selects a page of rides; zero fields are left out.
type ListParams struct {
	// Limit is the page's size, 1 to 100 (the server's default is 10).
	Limit int
	// StartingAfter asks for the rides older than this ride id.
	StartingAfter int64
	// Status keeps only rides with this status.
	Status Status
}

// RideList is a page of rides, newest first.
type RideList struct {
	Data []Ride `json:"data"`
	// HasMore says whether older rides follow: ask with StartingAfter set
	// to the last ride's ID.
	HasMore bool `json:"has_more"`
}

// ListRides returns a page of the caller's rides, newest first.
func (c *Client) ListRides(ctx context.Context, p ListParams) (*RideList, error) {
	q := url.Values{}
	if p.Limit != 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.StartingAfter != 0 {
		q.Set("starting_after", strconv.FormatInt(p.StartingAfter, 10))
	}
	if p.Status != "" {
		q.Set("status", string(p.Status))
	}
	path := "/rides"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	ans, err := c.do(ctx, exchange{method: http.MethodGet, path: path})
	if err != nil {
		return nil, err
	}
	var list RideList
	if err := json.Unmarshal(ans.body, &list); err != nil {
		return nil, fmt.Errorf("client: GET %s: decode the answer (status %d): %w", path, ans.status, err)
	}
	return &list, nil
}

func decodeRide(ans answer) (*Ride, error) {
	var r Ride
	if err := json.Unmarshal(ans.body, &r); err != nil {
		return nil, fmt.Errorf("client: decode the ride (status %d): %w", ans.status, err)
	}
	r.Replayed = ans.replayed
	return &r, nil
}
