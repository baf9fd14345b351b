// Package metrics defines the processes' Prometheus metrics and serves
// them. Each process builds its own registry (NewRegistry) and hands it to
// the parts it runs, which register their metrics on it; nothing uses
// Prometheus's global registry, so tests running stacks side by side each
// see only their own numbers.
//
// The metric sets are small types (HTTP, Idempotency, Stripe, the pool
// collector, WatchJobs) so that a process registers only what it does.
// Their methods are safe on a nil receiver and then record nothing: a
// component built without metrics, as in most tests, needs no special
// case.
//
// Every name starts with rocketrides_. Label values are fixed sets known
// in advance (route patterns, not raw paths), so a client cannot grow the
// number of series.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const namespace = "rocketrides"

// NewRegistry returns a registry holding the Go runtime and process
// collectors, ready for a process's own metrics.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// Handler serves g's metrics in the Prometheus exposition format. A
// collector that fails leaves its metrics out rather than failing the
// whole scrape.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Serve exposes g at http://addr/metrics until ctx is done. It listens
// before it returns, so an address that is taken or malformed stops the
// process at start; it then serves in the background. An empty addr
// serves nothing: background processes expose metrics only when
// METRICS_ADDR is set.
func Serve(ctx context.Context, addr string, g prometheus.Gatherer, logger *slog.Logger) error {
	if addr == "" {
		return nil
	}
	if logger == nil {
		logger = slog.Default()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen for metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", Handler(g))
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx) // a scrape cut short is retried by Prometheus
	}()
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			logger.ErrorContext(ctx, "metrics server stopped", "addr", addr, "error", err)
		}
	}()
	logger.InfoContext(ctx, "serving metrics", "addr", ln.Addr().String())
	return nil
}
