package e2e_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	rrclient "github.com/rocketrides/rocketrides/client"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet/fleettest"
	"github.com/rocketrides/rocketrides/internal/testkit/invariant"
)

// stripeKey is the secret key every process uses against the fake.
const stripeKey = "sk_test_e2e"

// rideParams is a ride from San Francisco to Oakland, as a form.
const rideParams = "origin_lat=37.7749&origin_lon=-122.4194&target_lat=37.8044&target_lon=-122.2712"

// stack is a database with its schema and demo users, the Stripe fake as a
// process, and a fleet to start the rest in, all configured to reach each
// other.
type stack struct {
	fleet  *fleet.Fleet
	pool   *pgxpool.Pool // for the checks, never for the system under test
	stripe *fleet.Process
	// token is the API token of the user whose card works; badToken's
	// card is always declined.
	token, badToken string
}

// newStack starts the Stripe fake, with stripeEnv (KEY=VALUE) on top of
// its settings, and seeds the users in the migrated database at dbURL,
// with bin/seed as an operator would.
func newStack(t *testing.T, dbURL string, stripeEnv ...string) *stack {
	t.Helper()
	s := &stack{token: "e2e-" + uuid.NewString(), badToken: "e2e-bad-" + uuid.NewString()}
	s.fleet = fleettest.New(t, "DATABASE_URL="+dbURL, "STRIPE_API_KEY="+stripeKey)
	s.stripe = fleettest.Start(t, s.fleet, "fakestripe", stripeEnv...)
	s.fleet.AddEnv("STRIPE_API_BASE=" + s.stripe.URL)
	fleettest.Run(t, s.fleet, "seed", []string{"SEED_USER_TOKEN=" + s.token, "SEED_BAD_SOURCE_TOKEN=" + s.badToken})

	cfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	cfg.MaxConns = 4
	// Ping every connection before use: tests restart Postgres under
	// this pool, and a check must not fail on a connection the restart
	// cut.
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return true }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s.pool = pool
	return s
}

// check runs invariant.Check and fails the test on any violation.
func (s *stack) check(t *testing.T, opts invariant.Options) invariant.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	report, err := invariant.Check(ctx, s.pool, invariant.NewStripeClient(s.stripe.URL, stripeKey), opts)
	require.NoError(t, err)
	require.True(t, report.OK(), "%s", report)
	return report
}

// stripeStats reads the fake's counters over HTTP.
func (s *stack) stripeStats(t *testing.T) map[string]int {
	t.Helper()
	resp, err := http.Get(s.stripe.URL + "/_fake/stats")
	require.NoError(t, err)
	defer resp.Body.Close()
	var stats map[string]int
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&stats))
	return stats
}

// drainReceipts runs the enqueuer and the worker once each, the worker
// mailing into mailDir, and returns what they printed.
func (s *stack) drainReceipts(t *testing.T, mailDir string) (enqueued, worked string) {
	t.Helper()
	enqueued = fleettest.Run(t, s.fleet, "enqueuer", nil, "-once")
	worked = fleettest.Run(t, s.fleet, "worker", []string{"MAIL_DIR=" + mailDir}, "-once")
	return enqueued, worked
}

// mails lists the .eml files in dir.
func mails(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.eml"))
	require.NoError(t, err)
	return files
}

// keyRow is what the tests read of an idempotency key.
type keyRow struct {
	ID            int64
	RecoveryPoint string
	ResponseCode  *int
	Locked        bool
}

func (s *stack) keyRow(t *testing.T, key string) keyRow {
	t.Helper()
	var k keyRow
	require.NoError(t, s.pool.QueryRow(context.Background(), `
		SELECT id, recovery_point, response_code, locked_at IS NOT NULL
		FROM idempotency_keys WHERE idempotency_key = $1`, key,
	).Scan(&k.ID, &k.RecoveryPoint, &k.ResponseCode, &k.Locked), "idempotency key %s", key)
	return k
}

// client is a Rocket Rides client with an API token.
type client struct {
	http  *http.Client
	token string
}

// newClient returns a client that gives up on a request after timeout.
// It opens a connection per request, so that a connection to an api that
// was killed is never reused by the next request.
func newClient(token string, timeout time.Duration) *client {
	return &client{
		http:  &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}},
		token: token,
	}
}

// reply is one answer to POST /rides, or the error in its place.
type reply struct {
	Status   int
	Replayed bool
	Header   http.Header
	Body     []byte
	Err      error
	Took     time.Duration
}

func (r reply) String() string {
	if r.Err != nil {
		return fmt.Sprintf("error after %s: %v", r.Took, r.Err)
	}
	return fmt.Sprintf("%d replayed=%t after %s: %s", r.Status, r.Replayed, r.Took, r.Body)
}

// fresh reports whether r is a 201 that ran the request, not a replay.
func (r reply) fresh() bool { return r.Err == nil && r.Status == http.StatusCreated && !r.Replayed }

// postRide sends POST /rides with key to the api at baseURL.
func (c *client) postRide(ctx context.Context, baseURL, key string) reply {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/rides", strings.NewReader(rideParams))
	if err != nil {
		return reply{Err: err}
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.http.Do(req)
	if err != nil {
		return reply{Err: err, Took: time.Since(start)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return reply{
		Status:   resp.StatusCode,
		Replayed: resp.Header.Get("Idempotent-Replayed") == "true",
		Header:   resp.Header,
		Body:     body,
		Err:      err,
		Took:     time.Since(start),
	}
}

// retryUntilFinal posts key round-robin to urls through the client
// package, as a good client does: the same key again after a 409, a 5xx
// or a network error, with backoff and Retry-After, until a final answer
// or ctx ends. It returns every reply.
func (c *client) retryUntilFinal(ctx context.Context, urls []string, key string) ([]reply, error) {
	var replies []reply
	rc, err := rrclient.New(&rrclient.Config{
		URL: urls[0], Token: c.token, AttemptTimeout: c.http.Timeout,
		HTTPClient:  &http.Client{Transport: &roundRobin{urls: urls, next: c.http.Transport}},
		MaxAttempts: rrclient.UntilDeadline, BaseDelay: 50 * time.Millisecond, MaxDelay: 2 * time.Second,
		OnAttempt: func(a rrclient.Attempt) {
			replies = append(replies, reply{Status: a.Status, Replayed: a.Replayed, Header: a.Header, Body: a.Body, Err: a.Err, Took: a.Latency})
		},
	})
	if err != nil {
		return nil, err
	}
	_, err = rc.CreateRide(ctx, rrclient.RideParams{
		OriginLat: 37.7749, OriginLon: -122.4194, TargetLat: 37.8044, TargetLon: -122.2712, IdempotencyKey: key,
	})
	var prob *rrclient.Error
	if err == nil || errors.As(err, &prob) && prob.Final {
		return replies, nil
	}
	return replies, fmt.Errorf("key %s not final after %d attempts, last %s: %w", key, len(replies), replies[len(replies)-1], cmp.Or(ctx.Err(), err))
}

// roundRobin sends each try to the next of urls.
type roundRobin struct {
	urls []string
	n    atomic.Int64
	next http.RoundTripper
}

func (rr *roundRobin) RoundTrip(req *http.Request) (*http.Response, error) {
	u, err := url.Parse(rr.urls[int(rr.n.Add(1)-1)%len(rr.urls)])
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	req.URL.Scheme, req.URL.Host, req.Host = u.Scheme, u.Host, ""
	return rr.next.RoundTrip(req)
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// isConnectionLost reports whether err is what a client sees when the
// server died mid-request: the connection closed without an answer.
func isConnectionLost(err error) bool {
	if err == nil {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "EOF")
}
