// Package apitest starts the whole API in-process for tests: a fresh
// database, the Stripe fake on a real HTTP listener, the demo users, and
// the API's real handler on an httptest server. Tests talk to it over
// HTTP, as a client would, and inspect Postgres and the fake afterwards.
//
// Every exchange made through Do is validated against the API's
// description, docs/openapi.yaml: the response always, the request when
// the API accepted it.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/api"
	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/dev/fakestripe/fakestripetest"
	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/platform/failpoint"
	"github.com/rocketrides/rocketrides/internal/platform/logctx"
	"github.com/rocketrides/rocketrides/internal/platform/metrics"
	"github.com/rocketrides/rocketrides/internal/ratelimit"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/user"
)

// StripeKey is the secret key the stack uses against the fake.
const StripeKey = "sk_test_apitest"

// Options tune the stack.
type Options struct {
	// Pool is the stack's database, already migrated; nil gives the stack
	// a fresh database of its own (dbtest.New).
	Pool *pgxpool.Pool
	// LockTimeout of idempotency keys; zero keeps the default.
	LockTimeout time.Duration
	// Plain runs the key store on its plain path (idem.Config.Plain,
	// IDEMPOTENCY_PIPELINE=off); false keeps the default, the fast path.
	Plain bool
	// SimulatedErrors accepts raise_error=true.
	SimulatedErrors bool
	// StripeRetries overrides stripe-go's own retries (default 2). With
	// 0 a lost Stripe answer reaches the API instead of being resolved by
	// stripe-go's retry with the same key.
	StripeRetries *int64
	// StripeURL uses another Stripe (such as stripe-mock) instead of
	// starting the fake. Stripe then being a black box, only User is
	// created (stripe-mock hands every customer the same id) and Stripe
	// is nil.
	StripeURL string
	// StripeKeyRetention is both how long the fake remembers its
	// idempotency keys and how long the service trusts it to.
	StripeKeyRetention time.Duration
	// MaxChargeAttempts; zero keeps the service's default.
	MaxChargeAttempts int
	// LogOutput receives the stack's logs, as text. Nil sends them to the
	// test's output, shown when it fails or with -v.
	LogOutput io.Writer
	// TokenLimit, FailedAuthLimit and ChargeLimit are the rate limits the
	// stack applies; each is off unless its Quota is set, as it is off
	// by default here (the api process has them on).
	TokenLimit, FailedAuthLimit, ChargeLimit ratelimit.Policy
	// RateLimitNow, if set, is the rate limits' clock (see
	// ratelimit.Config.Now).
	RateLimitNow func() time.Time
}

// Stack is a running API with its dependencies.
type Stack struct {
	Pool      *pgxpool.Pool
	Stripe    *fakestripe.Server
	StripeURL string
	Gateway   *payment.Gateway
	Keys      *idem.Store
	Service   *rides.Service
	// Registry holds the stack's metrics.
	Registry *prometheus.Registry
	// Handler is the API's root handler, which URL serves: for a test
	// that serves it again, on a server configured otherwise.
	Handler http.Handler
	// URL is the API's base URL.
	URL string
	// MetricsURL is the base URL of the metrics listener, apart from the
	// API's port as the api process runs it (METRICS_ADDR).
	MetricsURL string

	// User's card works; BadSourceUser's card is always declined.
	User, BadSourceUser   user.User
	Token, BadSourceToken string

	failpoints failpoint.Set
}

// New starts a stack whose resources end with the test.
func New(t testing.TB, opts Options) *Stack {
	t.Helper()
	s := &Stack{Pool: opts.Pool}
	if s.Pool == nil {
		s.Pool = dbtest.New(t)
	}
	if opts.StripeURL != "" {
		s.StripeURL = opts.StripeURL
	} else {
		s.Stripe, s.StripeURL = fakestripetest.Start(t, &fakestripe.Config{KeyRetention: opts.StripeKeyRetention})
	}
	s.Registry = metrics.NewRegistry()
	gateway, err := payment.New(&payment.Config{
		APIKey: StripeKey, BaseURL: s.StripeURL, Timeout: 5 * time.Second, MaxNetworkRetries: opts.StripeRetries,
		Metrics: metrics.NewStripe(s.Registry),
	})
	require.NoError(t, err)
	s.Gateway = gateway
	// Logs appear with the failing test's output (or with -v).
	logOutput := opts.LogOutput
	if logOutput == nil {
		logOutput = t.Output()
	}
	logger := slog.New(logctx.NewHandler(slog.NewTextHandler(logOutput, &slog.HandlerOptions{Level: slog.LevelDebug})))

	s.Token, s.BadSourceToken = "tok-"+uuid.NewString(), "tok-"+uuid.NewString()
	s.User = s.newUser(t, "user@example.com", "tok_visa", s.Token)
	if s.Stripe != nil {
		s.BadSourceUser = s.newUser(t, "user-bad-source@example.com", "tok_chargeCustomerFail", s.BadSourceToken)
	}

	s.Keys, err = idem.New(&idem.Config{Pool: s.Pool, LockTimeout: opts.LockTimeout, Metrics: metrics.NewIdempotency(s.Registry),
		Logger: logger, Plain: opts.Plain})
	require.NoError(t, err)
	s.Service, err = rides.NewService(&rides.ServiceConfig{
		Pool: s.Pool, Keys: s.Keys, Payments: s.Gateway, Failpoint: &s.failpoints, Logger: logger,
		StripeKeyRetention: opts.StripeKeyRetention, MaxChargeAttempts: opts.MaxChargeAttempts,
		Charges: opts.ChargeLimit,
	})
	require.NoError(t, err)
	ridesHandler, err := rides.NewHandler(&rides.HandlerConfig{
		Service: s.Service, Pool: s.Pool, SimulatedErrors: opts.SimulatedErrors, Failpoint: &s.failpoints, Logger: logger,
	})
	require.NoError(t, err)
	limits, err := ratelimit.New(&ratelimit.Config{Pool: s.Pool, Token: opts.TokenLimit, FailedAuth: opts.FailedAuthLimit, Logger: logger,
		Now: opts.RateLimitNow})
	require.NoError(t, err)
	handler, err := api.New(&api.Config{
		Pool:     s.Pool,
		Logger:   logger,
		Registry: s.Registry,
		Rides:    ridesHandler,
		Limits:   limits,
	})
	require.NoError(t, err)
	s.Handler = handler
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	metricsSrv := httptest.NewServer(metrics.Mux(s.Registry))
	t.Cleanup(metricsSrv.Close)
	s.MetricsURL = metricsSrv.URL
	return s
}

func (s *Stack) newUser(t testing.TB, email, source, token string) user.User {
	t.Helper()
	ctx := context.Background()
	customerID, err := s.Gateway.CreateCustomer(ctx, email, source, uuid.NewString())
	require.NoError(t, err)
	u, err := user.Upsert(ctx, s.Pool, email, customerID, token)
	require.NoError(t, err)
	return u
}

// Fail arms the failpoint name: fn runs whenever a request passes that
// seam, and its error fails the request there. A nil fn disarms it.
func (s *Stack) Fail(name string, fn func(context.Context) error) {
	s.failpoints.Arm(name, fn)
}

// Response is an API response, read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into a map.
func (r *Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.Body, &m), "body: %s", r.Body)
	return m
}

// Do sends a request to the API. headers are name/value pairs. The
// exchange is validated against docs/openapi.yaml (see checkContract).
func (s *Stack) Do(t testing.TB, method, path, body string, headers ...string) *Response {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	_, r, err := exchange(t, req, []byte(body))
	require.NoError(t, err)
	return r
}

// exchange sends req, whose body is body, reads the answer whole and
// validates the exchange against docs/openapi.yaml. The answer comes back
// twice: as sent, its body the bytes read, and as a Response.
func exchange(t testing.TB, req *http.Request, body []byte) (*http.Response, *Response, error) {
	t.Helper()
	// The request as sent, for validation once the answer is known.
	sent := req.Clone(context.Background())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("read the answer to %s %s: %w", req.Method, req.URL.RequestURI(), err)
	}
	r := &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
	checkContract(t, sent, body, r)
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, r, nil
}

// Doer sends requests to the stack as an http.Client does, validating
// each exchange against docs/openapi.yaml like Do. Give it to a generated
// client (as its HttpRequestDoer), so that every exchange the client is
// tested with is also checked against the document. Like Do, it fails the
// test, so it must be called from the test's goroutine.
type Doer struct {
	t testing.TB
}

// Doer returns a Doer that fails t.
func (s *Stack) Doer(t testing.TB) *Doer { return &Doer{t: t} }

// Do sends req and returns the answer with its body already read whole:
// what the caller reads is what was validated.
func (d *Doer) Do(req *http.Request) (*http.Response, error) {
	d.t.Helper()
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, fmt.Errorf("read the body of %s %s: %w", req.Method, req.URL.RequestURI(), err)
		}
		if err := req.Body.Close(); err != nil {
			return nil, fmt.Errorf("close the body of %s %s: %w", req.Method, req.URL.RequestURI(), err)
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, _, err := exchange(d.t, req, body)
	return resp, err
}

// DefaultParams is a ride from San Francisco to Oakland, as a form.
const DefaultParams = "origin_lat=37.7749&origin_lon=-122.4194&target_lat=37.8044&target_lon=-122.2712"

// PostRide sends POST /rides as User with key and form-encoded params.
func (s *Stack) PostRide(t testing.TB, key, params string) *Response {
	t.Helper()
	return s.Do(t, http.MethodPost, "/rides", params,
		"Authorization", "Bearer "+s.Token,
		"Idempotency-Key", key,
		"Content-Type", "application/x-www-form-urlencoded")
}

// Claim takes the lock on User's key for a ride with DefaultParams, as
// if another request were working it right now.
func (s *Stack) Claim(t testing.TB, key string) *idem.Key {
	t.Helper()
	k, replayed, err := s.Keys.Claim(context.Background(), idem.Request{
		UserID:   s.User.ID,
		Key:      key,
		Method:   http.MethodPost,
		Path:     rides.Path,
		Params:   rides.Params{OriginLat: 37.7749, OriginLon: -122.4194, TargetLat: 37.8044, TargetLon: -122.2712}.Canonical(),
		OriginIP: netip.MustParseAddr("127.0.0.1"),
	})
	require.NoError(t, err)
	require.False(t, replayed)
	return k
}

// NewKey returns a fresh client idempotency key.
func NewKey() string { return uuid.NewString() }

// KeyRow reads the idempotency key row of User's key.
func (s *Stack) KeyRow(t testing.TB, key string) *idem.Key {
	t.Helper()
	keys, err := s.Keys.FindKeys(context.Background(), key, 10)
	require.NoError(t, err, "idempotency key %q", key)
	for _, k := range keys {
		if k.UserID == s.User.ID {
			return k
		}
	}
	require.FailNow(t, "no such idempotency key", "%q of user %d", key, s.User.ID)
	return nil
}

// Count runs a count(*) query.
func (s *Stack) Count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, s.Pool.QueryRow(context.Background(), sql, args...).Scan(&n), sql)
	return n
}

// ChargesFor returns the fake's successful charges for the idempotency
// key row keyID, identified by their metadata: the request's user and
// Idempotency-Key (rides.ChargeRequest), or a legacy key's id. Declined
// charges (Stripe keeps those as failed charge objects) moved no money and
// are left out. A key row that cannot be read has none.
func (s *Stack) ChargesFor(keyID int64) []fakestripe.Charge {
	var (
		userID int64
		key    string
	)
	if err := s.Pool.QueryRow(context.Background(),
		`SELECT user_id, idempotency_key FROM idempotency_keys WHERE id = $1`, keyID).Scan(&userID, &key); err != nil {
		return nil
	}
	var out []fakestripe.Charge
	for _, c := range s.Stripe.Charges() {
		ours := c.Metadata[rides.MetadataUserID] == fmt.Sprint(userID) && c.Metadata[rides.MetadataIdempotencyKey] == key
		legacy := c.Metadata["idempotency_key_id"] == fmt.Sprint(keyID)
		if c.Status == "succeeded" && (ours || legacy) {
			out = append(out, c)
		}
	}
	return out
}

// Metrics scrapes GET /metrics from the metrics listener and returns
// each sample's value by its series as the exposition format writes it,
// such as `rocketrides_idempotency_outcomes_total{outcome="new"}`.
func (s *Stack) Metrics(t testing.TB) map[string]float64 {
	t.Helper()
	resp, err := http.Get(s.MetricsURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	samples := map[string]float64{}
	for line := range strings.Lines(string(body)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// Label values never contain a space followed by a number at the
		// end of the line, so the last space separates the value.
		i := strings.LastIndexByte(line, ' ')
		require.Positive(t, i, "metrics line %q", line)
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, "metrics line %q", line)
		samples[line[:i]] = v
	}
	return samples
}
