package api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/docs"
	"github.com/rocketrides/rocketrides/internal/api"
	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/platform/problem"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

func TestMetrics(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		*apitest.Stack
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{Stack: apitest.New(t, apitest.Options{})}
	}

	t.Run("CountsARideAndItsReplay", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()

		require.Equal(t, http.StatusCreated, b.PostRide(t, key, apitest.DefaultParams).Status)
		m := b.Metrics(t)
		require.Equal(t, 1.0, m[`rocketrides_idempotency_outcomes_total{outcome="new"}`])
		require.Equal(t, 0.0, m[`rocketrides_idempotency_outcomes_total{outcome="replay"}`])
		// One atomic phase from each recovery point the ride passed.
		for _, rp := range []string{"started", "ride_created", "charge_created"} {
			require.Equal(t, 1.0, m[`rocketrides_atomic_phase_duration_seconds_count{recovery_point="`+rp+`"}`], rp)
		}
		require.Equal(t, 1.0, m[`rocketrides_stripe_requests_total{operation="create_charge",outcome="succeeded"}`])
		require.Equal(t, 1.0, m[`rocketrides_stripe_request_duration_seconds_count{operation="create_charge",outcome="succeeded"}`])
		require.Equal(t, 1.0, m[`rocketrides_http_requests_total{method="POST",route="/rides",status="201"}`])

		replay := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
		m = b.Metrics(t)
		require.Equal(t, 1.0, m[`rocketrides_idempotency_outcomes_total{outcome="new"}`])
		require.Equal(t, 1.0, m[`rocketrides_idempotency_outcomes_total{outcome="replay"}`])
		require.Equal(t, 1.0, m[`rocketrides_stripe_requests_total{operation="create_charge",outcome="succeeded"}`], "a replay calls no one")
		require.Equal(t, 2.0, m[`rocketrides_http_requests_total{method="POST",route="/rides",status="201"}`])
		require.Equal(t, 2.0, m[`rocketrides_http_request_duration_seconds_count{method="POST",route="/rides"}`])
	})

	t.Run("ExportsEveryOutcomeFromTheStart", func(t *testing.T) {
		t.Parallel()
		m := setup(t).Metrics(t)
		for _, outcome := range []string{"new", "replay", "in_flight_conflict", "reuse_mismatch",
			"lock_takeover", "resumed", "lock_lost", "needs_attention"} {
			v, ok := m[`rocketrides_idempotency_outcomes_total{outcome="`+outcome+`"}`]
			require.True(t, ok, outcome)
			require.Zero(t, v, outcome)
		}
	})

	t.Run("CountsConflictsAndResumes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		inFlight := apitest.NewKey()
		b.Claim(t, inFlight)
		require.Equal(t, http.StatusConflict, b.PostRide(t, inFlight, apitest.DefaultParams).Status)
		require.Equal(t, http.StatusUnprocessableEntity, b.PostRide(t, inFlight, "origin_lat=0&origin_lon=0&target_lat=1&target_lon=1").Status)

		released := apitest.NewKey()
		require.NoError(t, b.Keys.Unlock(context.Background(), b.Claim(t, released)))
		require.Equal(t, http.StatusCreated, b.PostRide(t, released, apitest.DefaultParams).Status)

		stale := apitest.NewKey()
		_, err := b.Pool.Exec(context.Background(),
			`UPDATE idempotency_keys SET locked_at = now() - interval '1 hour' WHERE id = $1`, b.Claim(t, stale).ID)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, b.PostRide(t, stale, apitest.DefaultParams).Status)

		m := b.Metrics(t)
		require.Equal(t, 1.0, m[`rocketrides_idempotency_outcomes_total{outcome="in_flight_conflict"}`])
		require.Equal(t, 1.0, m[`rocketrides_idempotency_outcomes_total{outcome="reuse_mismatch"}`])
		require.Equal(t, 1.0, m[`rocketrides_idempotency_outcomes_total{outcome="resumed"}`])
		require.Equal(t, 1.0, m[`rocketrides_idempotency_outcomes_total{outcome="lock_takeover"}`])
		// The three claims made through b.Claim are new keys too.
		require.Equal(t, 3.0, m[`rocketrides_idempotency_outcomes_total{outcome="new"}`])
	})

	t.Run("CountsStripeOutcomes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		declined := b.Do(t, http.MethodPost, "/rides", apitest.DefaultParams,
			"Authorization", "Bearer "+b.BadSourceToken, "Idempotency-Key", apitest.NewKey(),
			"Content-Type", "application/x-www-form-urlencoded")
		require.Equal(t, http.StatusPaymentRequired, declined.Status)
		// stripe-go retries a 503 twice by itself; all three fail.
		b.Stripe.SetFaults(fakestripe.Faults{FailNext: 3, FailStatus: http.StatusServiceUnavailable})
		require.Equal(t, http.StatusServiceUnavailable, b.PostRide(t, apitest.NewKey(), apitest.DefaultParams).Status)

		m := b.Metrics(t)
		require.Equal(t, 1.0, m[`rocketrides_stripe_requests_total{operation="create_charge",outcome="declined"}`])
		require.Equal(t, 1.0, m[`rocketrides_stripe_requests_total{operation="create_charge",outcome="unavailable"}`])
		require.Equal(t, 0.0, m[`rocketrides_stripe_requests_total{operation="create_charge",outcome="succeeded"}`])
	})

	t.Run("LabelsRoutesByPattern", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, path := range []string{"/rides/1", "/rides/2", "/rides/abc"} {
			require.Equal(t, http.StatusNotFound, b.Do(t, http.MethodGet, path, "", "Authorization", "Bearer "+b.Token).Status)
		}
		require.Equal(t, http.StatusNotFound, b.Do(t, http.MethodGet, "/no/such/"+apitest.NewKey(), "").Status)

		m := b.Metrics(t)
		require.Equal(t, 3.0, m[`rocketrides_http_requests_total{method="GET",route="/rides/{id}",status="404"}`])
		require.Equal(t, 1.0, m[`rocketrides_http_requests_total{method="GET",route="unmatched",status="404"}`])
		for series := range m {
			require.NotContains(t, series, "abc", "a raw path became a label")
		}
	})

	// A request refused before its handler runs (a body too large by its
	// Content-Length, an encoded body) is still a request to its route;
	// these used to be counted as route="unmatched".
	t.Run("AttributesEarlyRejectsToTheirRoute", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tooLarge := b.Do(t, http.MethodPost, "/rides", strings.Repeat("x", api.MaxBodyBytes+1),
			"Authorization", "Bearer "+b.Token, "Idempotency-Key", apitest.NewKey(),
			"Content-Type", "application/x-www-form-urlencoded")
		require.Equal(t, http.StatusRequestEntityTooLarge, tooLarge.Status)
		encoded := b.Do(t, http.MethodPost, "/rides", apitest.DefaultParams,
			"Authorization", "Bearer "+b.Token, "Idempotency-Key", apitest.NewKey(),
			"Content-Type", "application/x-www-form-urlencoded", "Content-Encoding", "gzip")
		require.Equal(t, http.StatusUnsupportedMediaType, encoded.Status)

		m := b.Metrics(t)
		require.Equal(t, 1.0, m[`rocketrides_http_requests_total{method="POST",route="/rides",status="413"}`])
		require.Equal(t, 1.0, m[`rocketrides_http_requests_total{method="POST",route="/rides",status="415"}`])
		for series := range m {
			require.NotContains(t, series, `route="unmatched"`)
		}
	})

	t.Run("ExportsPoolStats", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Equal(t, http.StatusOK, b.Do(t, http.MethodGet, "/readyz", "").Status)
		m := b.Metrics(t)
		require.Equal(t, float64(b.Pool.Config().MaxConns), m["rocketrides_db_pool_max_connections"])
		require.Positive(t, m["rocketrides_db_pool_acquires_total"])
		require.Positive(t, m["rocketrides_db_pool_total_connections"])
		for _, name := range []string{"acquired_connections", "idle_connections", "acquire_duration_seconds_total", "empty_acquires_total"} {
			require.Contains(t, m, "rocketrides_db_pool_"+name)
		}
	})
}

// syncBuffer collects a stack's logs; requests log from many goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSpace(b.buf.String()), "\n")
}

// linesWith returns the log lines containing every one of parts.
func (b *syncBuffer) linesWith(parts ...string) []string {
	var out []string
	for _, line := range b.lines() {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			out = append(out, line)
		}
	}
	return out
}

func TestRequestLogs(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		*apitest.Stack
		logs *syncBuffer
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		logs := &syncBuffer{}
		return &testBundle{Stack: apitest.New(t, apitest.Options{LogOutput: io.MultiWriter(logs, t.Output())}), logs: logs}
	}

	t.Run("RequestLineCarriesTheIDs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, resp.Status)
		reqID := resp.Header.Get("Request-Id")
		require.NotEmpty(t, reqID)
		row := b.KeyRow(t, key)

		lines := b.logs.linesWith(`msg="Served request" `, "request_id="+reqID)
		require.Len(t, lines, 1, "logs:\n%s", strings.Join(b.logs.lines(), "\n"))
		line := lines[0]
		require.Contains(t, line, fmt.Sprintf("user_id=%d", b.User.ID))
		require.Contains(t, line, fmt.Sprintf("idempotency_key_id=%d", row.ID))
		require.Contains(t, line, "recovery_point=finished")
		require.Contains(t, line, "route=/rides")
		require.Contains(t, line, "status=201")
	})

	// A line logged deep inside the request, by the handler about a
	// failed Stripe call, names the request without being told.
	t.Run("InnerLinesCarryTheIDs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		b.Stripe.SetFaults(fakestripe.Faults{FailNext: 3, FailStatus: http.StatusServiceUnavailable})
		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusServiceUnavailable, resp.Status)
		row := b.KeyRow(t, key)

		lines := b.logs.linesWith(`msg="Payment provider unavailable; key left resumable"`, "request_id="+resp.Header.Get("Request-Id"))
		require.Len(t, lines, 1, "logs:\n%s", strings.Join(b.logs.lines(), "\n"))
		require.Contains(t, lines[0], fmt.Sprintf("user_id=%d", b.User.ID))
		require.Contains(t, lines[0], fmt.Sprintf("idempotency_key_id=%d", row.ID))
		require.Contains(t, lines[0], "recovery_point=ride_created")
	})

	t.Run("EachIDOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp := b.PostRide(t, apitest.NewKey(), apitest.DefaultParams)
		for _, line := range b.logs.linesWith("request_id=" + resp.Header.Get("Request-Id")) {
			for _, attr := range []string{"request_id=", "user_id=", "idempotency_key_id=", "recovery_point="} {
				require.LessOrEqual(t, strings.Count(line, " "+attr), 1, "%s", line)
			}
		}
	})

	// The client's X-Request-Id used to become the request's id: one
	// client could make its lines carry another request's id, and a 1 MB
	// header grew the log by 1 MB.
	t.Run("ServerChoosesTheRequestID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first := b.Do(t, http.MethodGet, "/healthz", "", "X-Request-Id", "req_someone_else")
		second := b.Do(t, http.MethodGet, "/healthz", "", "X-Request-Id", "req_someone_else")
		require.Equal(t, http.StatusOK, first.Status)
		reqID := first.Header.Get("Request-Id")
		require.Regexp(t, `^req_[0-9a-f]{12}_[0-9]+$`, reqID)
		require.NotEqual(t, reqID, second.Header.Get("Request-Id"))

		lines := b.logs.linesWith(`msg="Served request" `, "request_id="+reqID)
		require.Len(t, lines, 1, "logs:\n%s", strings.Join(b.logs.lines(), "\n"))
		require.Contains(t, lines[0], "client_request_id=req_someone_else")
		require.Empty(t, b.logs.linesWith(" request_id=req_someone_else"))
	})

	t.Run("ClientRequestIDIsCappedAndSanitised", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp := b.Do(t, http.MethodGet, "/healthz", "", "X-Request-Id", "tab\there-é-"+strings.Repeat("x", 900<<10))
		require.Equal(t, http.StatusOK, resp.Status)
		lines := b.logs.linesWith(`msg="Served request" `, "request_id="+resp.Header.Get("Request-Id"))
		require.Len(t, lines, 1)
		require.Less(t, len(lines[0]), 1<<10, "%.2000s", lines[0])
		// Printable ASCII only: the tab and both bytes of the é are '?'.
		require.Contains(t, lines[0], " client_request_id=tab?here-??-"+strings.Repeat("x", 64-len("tab?here-??-"))+"... ")
	})

	t.Run("LongPathIsClipped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		path := "/" + strings.Repeat("p", 900<<10)
		resp := b.Do(t, http.MethodGet, path, "")
		require.Equal(t, http.StatusNotFound, resp.Status)
		require.Less(t, len(resp.Body), 1<<10)
		require.Equal(t, "No such endpoint: "+problem.Clip(path), resp.JSON(t)["detail"])
		lines := b.logs.linesWith(`msg="Served request" `, "request_id="+resp.Header.Get("Request-Id"))
		require.Len(t, lines, 1)
		require.Less(t, len(lines[0]), 1<<10, "%.2000s", lines[0])
	})

	t.Run("UnauthenticatedRequestHasNoUser", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp := b.Do(t, http.MethodGet, "/rides", "")
		require.Equal(t, http.StatusUnauthorized, resp.Status)
		lines := b.logs.linesWith(`msg="Served request" `, "request_id="+resp.Header.Get("Request-Id"))
		require.Len(t, lines, 1)
		require.NotContains(t, lines[0], "user_id=")
		require.NotContains(t, lines[0], "idempotency_key_id=")
	})
}

func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	b := apitest.New(t, apitest.Options{})

	resp := b.Do(t, http.MethodGet, "/openapi.yaml", "")
	require.Equal(t, http.StatusOK, resp.Status)
	require.Equal(t, "application/yaml", resp.Header.Get("Content-Type"))
	require.Equal(t, docs.OpenAPI, resp.Body)
}

// TestProblemTypeResolves: a problem's type, resolved against the URL
// that answered it, is a page a person can read that explains its code.
func TestProblemTypeResolves(t *testing.T) {
	t.Parallel()
	b := apitest.New(t, apitest.Options{})

	resp := b.Do(t, http.MethodGet, "/no/such/path", "")
	require.Equal(t, http.StatusNotFound, resp.Status)
	typ, err := url.Parse(resp.JSON(t)["type"].(string))
	require.NoError(t, err)
	require.Equal(t, "not_found", typ.Fragment)

	page := b.Do(t, http.MethodGet, typ.Path, "")
	require.Equal(t, http.StatusOK, page.Status)
	require.Equal(t, "text/plain; charset=utf-8", page.Header.Get("Content-Type"))
	require.Equal(t, docs.Errors, page.Body)
	require.Contains(t, string(page.Body), "\n## not_found\n")
}

func TestDebugServer(t *testing.T) {
	t.Parallel()

	t.Run("OffByDefault", func(t *testing.T) {
		t.Parallel()
		b := apitest.New(t, apitest.Options{})
		// The API's own listener never serves profiles...
		resp := b.Do(t, http.MethodGet, "/debug/pprof/", "")
		require.Equal(t, http.StatusNotFound, resp.Status)
		// ...and without DEBUG_ADDR nothing else listens.
		require.NoError(t, api.ServeDebug(t.Context(), "", slog.New(slog.DiscardHandler)))
	})

	t.Run("ServesProfilesOnItsOwnAddress", func(t *testing.T) {
		t.Parallel()
		addr := freeAddr(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		require.NoError(t, api.ServeDebug(ctx, addr, slog.New(slog.DiscardHandler)))

		resp, err := http.Get("http://" + addr + "/debug/pprof/cmdline")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)

		cancel()
		require.Eventually(t, func() bool {
			_, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
			return err != nil
		}, 5*time.Second, 20*time.Millisecond, "the pprof listener closes with its context")
	})

	t.Run("RefusesABadAddress", func(t *testing.T) {
		t.Parallel()
		require.Error(t, api.ServeDebug(t.Context(), "not an address", slog.New(slog.DiscardHandler)))
	})
}

// freeAddr returns a loopback address nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}
