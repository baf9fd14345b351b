package metrics_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/metrics"
)

// scrape returns reg's metrics in the exposition format.
func scrape(t *testing.T, reg prometheus.Gatherer) string {
	t.Helper()
	rec := httptest.NewRecorder()
	metrics.Handler(reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	return rec.Body.String()
}

func TestMetricSets(t *testing.T) {
	t.Parallel()

	// Components built without metrics hold nil sets.
	t.Run("NilRecordsNothing", func(t *testing.T) {
		t.Parallel()
		var (
			h *metrics.HTTP
			i *metrics.Idempotency
			s *metrics.Stripe
		)
		h.Observe(http.MethodGet, "/", http.StatusOK, time.Millisecond)
		i.Outcome(metrics.OutcomeNew)
		i.PhaseDone("started", time.Now())
		s.Call(metrics.StripeCreateCharge, metrics.StripeSucceeded, time.Now())
	})

	t.Run("HTTPBoundsItsLabels", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		h := metrics.NewHTTP(reg)
		h.Observe("BREW", "", http.StatusTeapot, time.Millisecond)
		h.Observe(http.MethodGet, "/rides/{id}", http.StatusOK, time.Millisecond)
		out := scrape(t, reg)
		require.Contains(t, out, `rocketrides_http_requests_total{method="other",route="unmatched",status="418"} 1`)
		require.Contains(t, out, `rocketrides_http_requests_total{method="GET",route="/rides/{id}",status="200"} 1`)
		require.Contains(t, out, `rocketrides_http_request_duration_seconds_count{method="GET",route="/rides/{id}"} 1`)
	})

	t.Run("StripeExportsEveryCombinationFromTheStart", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		metrics.NewStripe(reg).Call(metrics.StripeListCharges, metrics.StripeUnavailable, time.Now())
		out := scrape(t, reg)
		require.Contains(t, out, `rocketrides_stripe_requests_total{operation="create_charge",outcome="succeeded"} 0`)
		require.Contains(t, out, `rocketrides_stripe_requests_total{operation="list_charges",outcome="unavailable"} 1`)
	})

	t.Run("PhasesByRecoveryPoint", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		m := metrics.NewIdempotency(reg)
		m.PhaseDone("started", time.Now().Add(-30*time.Millisecond))
		m.Outcome(metrics.OutcomeLockLost)
		out := scrape(t, reg)
		require.Contains(t, out, `rocketrides_atomic_phase_duration_seconds_count{recovery_point="started"} 1`)
		require.Contains(t, out, `rocketrides_atomic_phase_duration_seconds_bucket{recovery_point="started",le="0.025"} 0`)
		require.Contains(t, out, `rocketrides_idempotency_outcomes_total{outcome="lock_lost"} 1`)
	})
}

func TestServe(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.DiscardHandler)

	t.Run("EmptyAddressServesNothing", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, metrics.Serve(t.Context(), "", metrics.NewRegistry(), logger))
	})

	t.Run("ServesUntilCancelled", func(t *testing.T) {
		t.Parallel()
		reg := metrics.NewRegistry()
		counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "rocketrides_test_total", Help: "A test counter."})
		reg.MustRegister(counter)
		counter.Add(3)

		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		// Another process may take the probed port before Serve listens
		// on it; only then is a new one probed.
		addr := freeAddr(t)
		err := metrics.Serve(ctx, addr, reg, logger)
		for attempt := 1; errors.Is(err, syscall.EADDRINUSE) && attempt < 3; attempt++ {
			addr = freeAddr(t)
			err = metrics.Serve(ctx, addr, reg, logger)
		}
		require.NoError(t, err)

		resp, err := http.Get("http://" + addr + "/metrics")
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, resp.Body.Close())
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, string(body), "rocketrides_test_total 3")
		require.True(t, strings.Contains(string(body), "go_goroutines"), "runtime metrics are registered")

		cancel()
		require.Eventually(t, func() bool {
			_, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
			return err != nil
		}, 5*time.Second, 20*time.Millisecond, "the listener closes with its context")
	})

	t.Run("RefusesAnAddressInUse", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		require.Error(t, metrics.Serve(t.Context(), ln.Addr().String(), metrics.NewRegistry(), logger))
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
