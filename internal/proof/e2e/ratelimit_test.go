package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet/fleettest"
	"github.com/rocketrides/rocketrides/internal/testkit/invariant"
)

// TestRateLimitsAcrossProcesses runs two api processes on one database,
// with small limits, and sends a client's requests to both in turn: each
// limit must count them once, whichever instance served them. Before the
// limits, one token made 10,105 charges in 15 s, one address drew 63,317
// answers of 401 in 10 s, and no answer was ever a 429.
func TestRateLimitsAcrossProcesses(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		*stack
		urls   []string // two api processes
		client *client
	}
	// setup starts the api twice with env, every limit off but those env
	// turns on.
	setup := func(t *testing.T, env ...string) *testBundle {
		t.Helper()
		b := &testBundle{stack: newStack(t, dbtest.NewURL(t))}
		env = append([]string{"RATE_LIMIT_TOKEN_REQUESTS=0", "RATE_LIMIT_AUTH_FAILURES=0", "RATE_LIMIT_CHARGES=0"}, env...)
		for range 2 {
			b.urls = append(b.urls, fleettest.Start(t, b.fleet, "api", env...).URL)
		}
		b.client = newClient(b.token, 30*time.Second)
		return b
	}

	t.Run("RefusesATokensRequestsPastItsQuotaOnEveryInstance", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "RATE_LIMIT_TOKEN_REQUESTS=6", "RATE_LIMIT_TOKEN_WINDOW=60s")
		for i := range 6 {
			resp := b.client.get(t, b.urls[i%2], "/rides")
			require.Equal(t, http.StatusOK, resp.Status, "request %d of 6: %s", i+1, resp.Body)
		}
		for i := range 2 {
			resp := b.client.get(t, b.urls[i%2], "/rides")
			resp.requireRateLimited(t, "token", 6, 60)
		}
		// A new ride is refused too, and runs nothing.
		r := b.client.postRide(context.Background(), b.urls[0], uuid.NewString())
		require.Equal(t, http.StatusTooManyRequests, r.Status, "%s", r)
		require.Zero(t, b.stripeStats(t)["charge_requests"])
		// The quota is the token's: another user's is whole.
		other := newClient(b.badToken, 30*time.Second)
		require.Equal(t, http.StatusOK, other.get(t, b.urls[1], "/rides").Status)
	})

	t.Run("RefusesAnAddressPastItsFailedAuthenticationsEvenWithAValidToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "RATE_LIMIT_AUTH_FAILURES=4", "RATE_LIMIT_AUTH_FAILURES_WINDOW=60s")
		guesser := newClient("e2e-guess-"+uuid.NewString(), 30*time.Second)
		for i := range 3 {
			resp := guesser.get(t, b.urls[i%2], "/rides")
			require.Equal(t, http.StatusUnauthorized, resp.Status, "failure %d of 4: %s", i+1, resp.Body)
		}
		// No token at all fails authentication too.
		require.Equal(t, http.StatusUnauthorized, newClient("", 30*time.Second).get(t, b.urls[1], "/rides").Status)
		// Past the quota every request from the address is refused, on
		// either instance, the valid token's as well: a guess that hits
		// must look like one that misses.
		guesser.get(t, b.urls[0], "/rides").requireRateLimited(t, "failed_auth", 4, 60)
		b.client.get(t, b.urls[1], "/rides").requireRateLimited(t, "failed_auth", 4, 60)
		b.client.get(t, b.urls[0], "/rides").requireRateLimited(t, "failed_auth", 4, 60)
	})

	t.Run("CapsAUsersChargesAndStoresNothingOnTheRefusedKey", func(t *testing.T) {
		t.Parallel()
		const window = 60 // seconds: the test ends it itself, below
		b := setup(t, "RATE_LIMIT_CHARGES=2", "RATE_LIMIT_CHARGES_WINDOW="+strconv.Itoa(window)+"s")
		ctx := context.Background()
		first, second, refused := uuid.NewString(), uuid.NewString(), uuid.NewString()
		require.True(t, b.client.postRide(ctx, b.urls[0], first).fresh())
		require.True(t, b.client.postRide(ctx, b.urls[1], second).fresh())

		r := b.client.postRide(ctx, b.urls[0], refused)
		resp := response{Status: r.Status, Header: r.Header, Body: r.Body}
		resp.requireRateLimited(t, "charges", 2, window)
		// Refused before anything: no key, no ride, no charge.
		var keys, rides int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1`, refused).Scan(&keys))
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM rides`).Scan(&rides))
		require.Zero(t, keys, "nothing is stored on the refused key")
		require.Equal(t, 2, rides)
		require.Equal(t, 2, b.stripeStats(t)["charge_requests"])

		// The other instance counts the same charges.
		r = b.client.postRide(ctx, b.urls[1], refused)
		require.Equal(t, http.StatusTooManyRequests, r.Status, "%s", r)
		// A replay of a finished key is answered from its key, never
		// refused by the cap.
		for _, url := range b.urls {
			r = b.client.postRide(ctx, url, first)
			require.True(t, r.Status == http.StatusCreated && r.Replayed, "%s", r)
		}

		// Once the window has passed, the refused key runs. The count is
		// Postgres's alone, so the charges are forgotten there, as the
		// window's end and the sweep would, rather than waited for.
		_, err := b.pool.Exec(ctx, `DELETE FROM rate_limit_charges`)
		require.NoError(t, err)
		require.True(t, b.client.postRide(ctx, b.urls[1], refused).fresh())
		// Replays never counted: the new window has room for one more
		// charge after them, and no more.
		for _, key := range []string{first, second, refused, first} {
			r = b.client.postRide(ctx, b.urls[0], key)
			require.True(t, r.Status == http.StatusCreated && r.Replayed, "%s", r)
		}
		require.True(t, b.client.postRide(ctx, b.urls[0], uuid.NewString()).fresh())
		r = b.client.postRide(ctx, b.urls[1], uuid.NewString())
		require.Equal(t, http.StatusTooManyRequests, r.Status, "%s", r)

		report := b.check(t, invariant.Options{})
		require.Equal(t, 4, report.Charges)
		require.Equal(t, 4, b.stripeStats(t)["charges"])
	})

	t.Run("RateLimitsOffTurnsEveryLimitOff", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "RATE_LIMITS=off", "RATE_LIMIT_TOKEN_REQUESTS=1", "RATE_LIMIT_AUTH_FAILURES=1", "RATE_LIMIT_CHARGES=1")
		ctx := context.Background()
		guesser := newClient("e2e-guess-"+uuid.NewString(), 30*time.Second)
		for i := range 3 {
			require.True(t, b.client.postRide(ctx, b.urls[i%2], uuid.NewString()).fresh())
			require.Equal(t, http.StatusOK, b.client.get(t, b.urls[i%2], "/rides").Status)
			require.Equal(t, http.StatusUnauthorized, guesser.get(t, b.urls[i%2], "/rides").Status)
		}
	})
}

// response is an answer read whole.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// get sends GET path to the api at baseURL with the client's token (none
// when it has none).
func (c *client) get(t *testing.T, baseURL, path string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, baseURL+path, nil)
	require.NoError(t, err)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: body}
}

// rateLimit is the RateLimit field of a refusal, as the IETF httpapi draft
// writes it: the policy's name, the quota left (none) and the seconds
// until it is restored.
var rateLimit = regexp.MustCompile(`^"([a-z_]+)";r=0;t=([0-9]+)$`)

// requireRateLimited checks that r is a refusal under policy (quota per
// window seconds): 429 rate_limited, with Retry-After, RateLimit-Policy
// and RateLimit as the draft writes them, Retry-After within the window
// (the charge cap's within a window and a tenth).
func (r response) requireRateLimited(t *testing.T, policy string, quota, window int) {
	t.Helper()
	require.Equal(t, http.StatusTooManyRequests, r.Status, "%s", r.Body)
	var p struct{ Code string }
	require.NoError(t, json.Unmarshal(r.Body, &p))
	require.Equal(t, "rate_limited", p.Code)
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
	require.Equal(t, fmt.Sprintf(`"%s";q=%d;w=%d`, policy, quota, window), r.Header.Get("RateLimit-Policy"))
	m := rateLimit.FindStringSubmatch(r.Header.Get("RateLimit"))
	require.NotNil(t, m, "RateLimit: %q", r.Header.Get("RateLimit"))
	require.Equal(t, policy, m[1])
	retryAfter, err := strconv.Atoi(r.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After: %q", r.Header.Get("Retry-After"))
	require.Equal(t, m[2], strconv.Itoa(retryAfter), "Retry-After is the end of the window")
	most := window
	if policy == "charges" {
		most += (window + 9) / 10 // the cap's window slides in tenths (package ratelimit)
	}
	require.True(t, retryAfter >= 1 && retryAfter <= most, "Retry-After %d within a %d s window", retryAfter, window)
}
