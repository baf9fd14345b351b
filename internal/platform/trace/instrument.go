package trace

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	oteltrace "go.opentelemetry.io/otel/trace"
)

// The instrumentation of the libraries the processes use, each following
// OpenTelemetry's semantic conventions for its kind of span. Each is
// installed only when the process traces (On): with tracing off, a
// request pays nothing for it.

// Handler is h with a server span for every request (otelhttp), named by
// its method until Route names its route. Without tracing, h itself.
func Handler(h http.Handler) http.Handler {
	if !On() {
		return h
	}
	return otelhttp.NewHandler(h, "http.server",
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }))
}

// Route names the server span of ctx by the route the router matched
// (POST /rides), as the HTTP conventions ask, once it is known.
func Route(ctx context.Context, method, route string) {
	span := oteltrace.SpanFromContext(ctx)
	if route == "" || !span.IsRecording() {
		return
	}
	span.SetName(method + " " + route)
	span.SetAttributes(semconv.HTTPRoute(route))
}

// Transport is rt with a client span for every request (otelhttp), which
// also carries the trace to the server. Without tracing, rt itself.
func Transport(rt http.RoundTripper) http.RoundTripper {
	if !On() {
		return rt
	}
	return otelhttp.NewTransport(rt)
}

// PgxTracer is the tracer of a connection pool's statements (otelpgx):
// a span per query, batch and connection, with the statement but never
// its arguments. Nil without tracing.
func PgxTracer() pgx.QueryTracer {
	if !On() {
		return nil
	}
	return otelpgx.NewTracer()
}

// RiverMiddleware is a River client's spans (otelriver): a span for each
// insert and each job worked. A job carries the traceparent it was
// inserted with in its metadata, and the span that works it links to that
// trace. The enqueuer writes that traceparent itself, the one of the
// request that staged the job, so its own client does not propagate the
// batch's (propagate false). Nil without tracing.
func RiverMiddleware(propagate bool) []rivertype.Middleware {
	if !On() {
		return nil
	}
	return []rivertype.Middleware{otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
		EnableTracePropagation:      propagate,
		EnableWorkSpanJobKindSuffix: true,
	})}
}

// Metadata is River job metadata carrying traceparent, for a job moved on
// behalf of the request that staged it; nil for none.
func Metadata(traceparent *string) []byte {
	if traceparent == nil {
		return nil
	}
	metadata, _ := json.Marshal(map[string]string{"traceparent": *traceparent}) // a map of strings always encodes
	return metadata
}
