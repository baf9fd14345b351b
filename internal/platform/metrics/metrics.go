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
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rocketrides/rocketrides/internal/platform/serve"
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

// Mux serves g at GET /metrics (and HEAD): the metrics listener's handler.
func Mux(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", Handler(g))
	return mux
}

// Serve exposes g at http://addr/metrics until ctx is done. It listens
// before it returns, so an address that is taken or malformed stops the
// process at start; it then serves in the background. An empty addr
// serves nothing: processes expose metrics only when METRICS_ADDR is set,
// on an address of its own, never on a public port.
func Serve(ctx context.Context, addr string, g prometheus.Gatherer, logger *slog.Logger) error {
	return serve.Background(ctx, &serve.Config{
		Name:    "metrics",
		Addr:    addr,
		Handler: Mux(g),
		Logger:  logger,
		// A scrape cut short is retried by Prometheus.
		ShutdownTimeout: 5 * time.Second,
	})
}
