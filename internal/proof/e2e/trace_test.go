package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/jobs"
	"github.com/rocketrides/rocketrides/internal/platform/trace"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet/fleettest"
	"github.com/rocketrides/rocketrides/internal/testkit/otlpsink"
)

// TestTraceExported sends the traces of real processes to a real OTLP
// receiver, the api and the worker over gRPC, the Stripe fake, the
// enqueuer and the completer over http/protobuf, and reads them back
// through the query API Jaeger's UI reads: a new ride's span tree from
// the HTTP server span down to Postgres and the Stripe fake, its receipt
// job's trace linked to it, and a ride whose request failed at Stripe,
// resumed by the completer in a trace linked to the request's. No span
// carries the API token, the client's Idempotency-Key or the card.
func TestTraceExported(t *testing.T) {
	t.Parallel()
	sink, err := otlpsink.Start()
	require.NoError(t, err)
	t.Cleanup(sink.Close)
	grpcEnv, httpEnv := sink.Env("grpc"), sink.Env("http/protobuf")

	s := newStack(t, dbtest.NewURL(t), httpEnv...)
	api := fleettest.Start(t, s.fleet, "api", grpcEnv...)
	fleettest.Start(t, s.fleet, "enqueuer", append(httpEnv, "ENQUEUER_POLL_INTERVAL=100ms")...)
	fleettest.Start(t, s.fleet, "worker", append(grpcEnv, "MAIL_DIR="+t.TempDir())...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newClient(s.token, 15*time.Second)

	// A new ride: one trace, from the HTTP server span down.
	key := uuid.NewString()
	r := c.postRide(ctx, api.URL, key)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r)
	row := s.keyRow(t, key)
	ride := readTrace(ctx, t, sink, s.traceOf(t, row.ID), "POST /rides", "api", "fakestripe")

	server := one(t, ride, "POST /rides")
	require.Equal(t, "api", ride.Service(server))
	require.Nil(t, parent(server), "the request is the trace's root")
	requireTags(t, server, map[string]any{
		"http.request.method": "POST", "http.route": "/rides", "http.response.status_code": int64(201), "url.scheme": "http",
	})
	claim := childOf(t, ride, server, "claim")
	requireTags(t, claim, map[string]any{string(trace.Outcome): "new", string(trace.KeyID): row.ID})
	tag(t, claim, string(trace.UserID))
	for _, name := range []string{"phase started -> ride_created", "phase ride_created -> charge_created -> finished"} {
		phase := childOf(t, ride, server, name)
		requireTags(t, phase, map[string]any{string(trace.KeyID): row.ID})
		requireDB(t, ride, phase)
	}
	requireDB(t, ride, claim)
	charge := childOf(t, ride, server, "stripe charge")
	stripeKey := tag(t, charge, string(trace.StripeKey))
	require.True(t, strings.HasPrefix(stripeKey.(string), "rocket-rides-"), "%v", stripeKey)
	call := childOf(t, ride, charge, "HTTP POST")
	requireTags(t, call, map[string]any{"http.request.method": "POST", "http.response.status_code": int64(200), "server.address": "127.0.0.1"})
	atStripe := childOf(t, ride, call, "POST")
	require.Equal(t, "fakestripe", ride.Service(atStripe), "the fake's span continues the api's call")

	// The receipt job: a trace of the worker's, linked to the ride's.
	work := "river.work/" + (jobs.ReceiptArgs{}).Kind()
	receipt := linkedTrace(ctx, t, sink, work, ride)
	require.Equal(t, "worker", receipt.Service(one(t, receipt, work)))

	// A ride whose request fails at Stripe (each of stripe-go's three
	// tries answered 503), left at ride_created for the completer.
	failing := uuid.NewString()
	s.stripeFaults(t, `{"fail_next": 3, "fail_status": 503}`)
	r = c.postRide(ctx, api.URL, failing)
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r)
	require.Equal(t, 0, s.stripeFaultsLeft(t), "every fault was spent on the request")
	failed := s.keyRow(t, failing)
	require.Equal(t, "ride_created", failed.RecoveryPoint)
	first := readTrace(ctx, t, sink, s.traceOf(t, failed.ID), "POST /rides")
	one(t, first, "refuse 503 payment_unavailable")
	failedCharge := one(t, first, "stripe charge")
	_, isError := failedCharge.Tag("error")
	require.True(t, isError, "the failed charge is an error span")
	require.Len(t, children(first, failedCharge, "HTTP POST"), 3, "each of stripe-go's tries is a span")

	out := fleettest.Run(t, s.fleet, "completer", append(httpEnv, "COMPLETER_MIN_AGE=1ms", "COMPLETER_RETRY_INTERVAL=1ms"), "-once")
	require.Equal(t, "succeeded=1 failed=0", out)
	resumed := linkedTrace(ctx, t, sink, "resume", first)
	resume := one(t, resumed, "resume")
	require.Equal(t, "completer", resumed.Service(resume))
	require.Nil(t, parent(resume), "the resume is a trace of its own")
	requireTags(t, resume, map[string]any{string(trace.KeyID): failed.ID, string(trace.From): "ride_created"})
	resumedCharge := childOf(t, resumed, resume, "stripe charge")
	require.Equal(t, tag(t, failedCharge, string(trace.StripeKey)), tag(t, resumedCharge, string(trace.StripeKey)),
		"the resume sends Stripe the request's key")
	childOf(t, resumed, resume, "phase ride_created -> charge_created -> finished")

	// Nothing secret on any span the sink received.
	var all []otlpsink.Span
	sink.Await(ctx, func(spans []otlpsink.Span) bool { all = spans; return true })
	for _, span := range all {
		for _, secret := range []string{s.token, key, failing, "tok_visa"} {
			require.NotContains(t, span.OperationName, secret)
			for _, tg := range span.Tags {
				require.NotContains(t, fmt.Sprint(tg.Value), secret, "%s: %s", span.OperationName, tg.Key)
			}
		}
	}
}

// traceOf is the trace id of the request that claimed key id, from the
// traceparent stored with the key.
func (s *stack) traceOf(t *testing.T, id int64) string {
	t.Helper()
	var tp string
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT traceparent FROM idempotency_keys WHERE id = $1`, id).Scan(&tp))
	parts := strings.Split(tp, "-")
	require.Len(t, parts, 4, "a W3C traceparent: %q", tp)
	return parts[1]
}

// stripeFaults sets the Stripe fake's faults (POST /_fake/faults).
func (s *stack) stripeFaults(t *testing.T, body string) {
	t.Helper()
	resp, err := http.Post(s.stripe.URL+"/_fake/faults", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// stripeFaultsLeft is how many of the fake's fail_next faults are left.
func (s *stack) stripeFaultsLeft(t *testing.T) int {
	t.Helper()
	resp, err := http.Get(s.stripe.URL + "/_fake/faults")
	require.NoError(t, err)
	defer resp.Body.Close()
	var faults struct {
		FailNext int `json:"fail_next"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&faults))
	return faults.FailNext
}

// readTrace reads the trace id through the sink's query API, once its
// span called root has arrived and each of services has sent a span.
func readTrace(ctx context.Context, t *testing.T, sink *otlpsink.Sink, id, root string, services ...string) otlpsink.Trace {
	t.Helper()
	var tr otlpsink.Trace
	waitFor(t, time.Minute, "trace "+id+" with its "+root+" span", func() bool {
		var err error
		if tr, err = otlpsink.Read(ctx, sink.HTTP, id); err != nil || len(tr.Named(root)) == 0 {
			return false
		}
		for _, service := range services {
			if !slices.ContainsFunc(tr.Spans, func(sp otlpsink.Span) bool { return tr.Service(sp) == service }) {
				return false
			}
		}
		return true
	})
	return tr
}

// linkedTrace reads the trace whose span called name links to to's
// trace, once that span has arrived.
func linkedTrace(ctx context.Context, t *testing.T, sink *otlpsink.Sink, name string, to otlpsink.Trace) otlpsink.Trace {
	t.Helper()
	var found otlpsink.Span
	ok := sink.Await(ctx, func(spans []otlpsink.Span) bool {
		i := slices.IndexFunc(spans, func(sp otlpsink.Span) bool {
			return sp.OperationName == name && slices.ContainsFunc(sp.References, func(ref otlpsink.Reference) bool {
				return ref.RefType == "FOLLOWS_FROM" && ref.TraceID == to.TraceID
			})
		})
		if i >= 0 {
			found = spans[i]
		}
		return i >= 0
	})
	require.True(t, ok, "a span %q linked to trace %s", name, to.TraceID)
	// From any span of a ride, a person reaches the span it links to.
	for _, ref := range found.References {
		if ref.RefType == "FOLLOWS_FROM" {
			require.True(t, slices.ContainsFunc(to.Spans, func(sp otlpsink.Span) bool { return sp.SpanID == ref.SpanID }),
				"%s links to a span of trace %s", name, to.TraceID)
		}
	}
	return readTrace(ctx, t, sink, found.TraceID, name)
}

// one is tr's one span called name.
func one(t *testing.T, tr otlpsink.Trace, name string) otlpsink.Span {
	t.Helper()
	found := tr.Named(name)
	require.Len(t, found, 1, "one span %q among %q", name, names(tr.Spans))
	return found[0]
}

// childOf is tr's one span called name whose parent is p.
func childOf(t *testing.T, tr otlpsink.Trace, p otlpsink.Span, name string) otlpsink.Span {
	t.Helper()
	found := slices.DeleteFunc(children(tr, p, ""), func(sp otlpsink.Span) bool { return sp.OperationName != name })
	require.Len(t, found, 1, "one span %q under %q, among %q", name, p.OperationName, names(children(tr, p, "")))
	return found[0]
}

// children are tr's spans under p whose name starts with prefix.
func children(tr otlpsink.Trace, p otlpsink.Span, prefix string) []otlpsink.Span {
	var out []otlpsink.Span
	for _, sp := range tr.Spans {
		if ref := parent(sp); ref != nil && ref.SpanID == p.SpanID && strings.HasPrefix(sp.OperationName, prefix) {
			out = append(out, sp)
		}
	}
	return out
}

// parent is sp's CHILD_OF reference, nil for a trace's root.
func parent(sp otlpsink.Span) *otlpsink.Reference {
	for _, ref := range sp.References {
		if ref.RefType == "CHILD_OF" {
			return &ref
		}
	}
	return nil
}

// requireDB requires a Postgres statement under p, at any depth (a
// pipelined phase's statements are a batch's children), following the
// database conventions.
func requireDB(t *testing.T, tr otlpsink.Trace, p otlpsink.Span) {
	t.Helper()
	under := children(tr, p, "")
	for i := 0; i < len(under); i++ {
		under = append(under, children(tr, under[i], "")...)
	}
	require.True(t, slices.ContainsFunc(under, func(sp otlpsink.Span) bool {
		system, _ := sp.Tag("db.system.name")
		_, statement := sp.Tag("db.query.text")
		return system == "postgresql" && statement
	}), "Postgres statements under %q, among %q", p.OperationName, names(under))
}

// requireTags requires each of want's attributes on sp.
func requireTags(t *testing.T, sp otlpsink.Span, want map[string]any) {
	t.Helper()
	for k, v := range want {
		require.EqualValues(t, v, tag(t, sp, k), "%s of %s", k, sp.OperationName)
	}
}

// tag is sp's attribute key, which it must have.
func tag(t *testing.T, sp otlpsink.Span, key string) any {
	t.Helper()
	v, ok := sp.Tag(key)
	require.True(t, ok, "%s has %s, among %v", sp.OperationName, key, sp.Tags)
	return v
}

func names(spans []otlpsink.Span) []string {
	var out []string
	for _, sp := range spans {
		out = append(out, sp.OperationName)
	}
	return out
}
