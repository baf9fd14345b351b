package traces

import (
	"context"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/rocketrides/rocketrides/internal/completer"
	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/jobs"
	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/platform/mail"
	"github.com/rocketrides/rocketrides/internal/platform/trace"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

// exporter holds every span the test binary ends, each test picking out
// its own by the traces its requests made.
var exporter = tracetest.NewInMemoryExporter()

func TestMain(m *testing.M) {
	// Installed before any stack is built: the instrumentation is
	// installed only in a process that traces.
	trace.Install(trace.NewProvider("test", sdktrace.AlwaysSample(), sdktrace.WithSyncer(exporter)))
	os.Exit(m.Run())
}

func TestRideTrace(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) *apitest.Stack {
		t.Helper()
		return apitest.New(t, apitest.Options{})
	}

	t.Run("NewRide", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		key := apitest.NewKey()
		resp, spans := ride(t, s, key)
		require.Equal(t, http.StatusCreated, resp.Status)
		row := s.KeyRow(t, key)

		server := one(t, spans, "POST /rides")
		require.Equal(t, one(t, spans, "client").SpanContext.SpanID(), server.Parent.SpanID(), "the server continues the client's trace")
		require.Equal(t, "new", attr(one(t, spans, "claim"), trace.Outcome).AsString())
		require.Equal(t, server.SpanContext.SpanID(), one(t, spans, "claim").Parent.SpanID())
		for _, name := range []string{"phase started -> ride_created", "stripe charge", "phase ride_created -> charge_created -> finished"} {
			span := one(t, spans, name)
			require.Equal(t, server.SpanContext.SpanID(), span.Parent.SpanID(), "%s is the request's step", name)
		}
		for _, name := range []string{"claim", "phase started -> ride_created", "phase ride_created -> charge_created -> finished"} {
			require.Equal(t, row.ID, attr(one(t, spans, name), trace.KeyID).AsInt64(), "%s names the key", name)
		}
		charge := one(t, spans, "stripe charge")
		require.Equal(t, rides.StripeKey(row), attr(charge, trace.StripeKey).AsString())
		require.NotEmpty(t, children(spans, charge, "HTTP POST"), "the HTTP call to Stripe is the charge's child")
		require.NotEmpty(t, children(spans, one(t, spans, "phase started -> ride_created"), ""), "the phase's statements are its children")

		// Never the token or the client's key, on any span of the ride.
		for _, span := range spans {
			for _, kv := range span.Attributes {
				require.NotContains(t, kv.Value.String(), s.Token, "%s: %s", span.Name, kv.Key)
				require.NotContains(t, kv.Value.String(), key, "%s: %s", span.Name, kv.Key)
			}
		}
		// The key and its staged receipt keep the ride's trace.
		var keyTrace, jobTrace string
		require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT traceparent FROM idempotency_keys WHERE id = $1`, row.ID).Scan(&keyTrace))
		require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT traceparent FROM staged_jobs`).Scan(&jobTrace))
		require.Contains(t, keyTrace, server.SpanContext.TraceID().String())
		require.Contains(t, jobTrace, server.SpanContext.TraceID().String())
	})

	t.Run("Replay", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		key := apitest.NewKey()
		resp, first := ride(t, s, key)
		require.Equal(t, http.StatusCreated, resp.Status)
		resp, replayed := ride(t, s, key)
		require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
		require.Equal(t, "replay", attr(one(t, replayed, "claim"), trace.Outcome).AsString())
		replay := one(t, replayed, "replay")
		require.Equal(t, int64(http.StatusCreated), attr(replay, trace.ResponseStatus).AsInt64())
		requireLinked(t, replay, first)
		requireLinked(t, one(t, replayed, "claim"), first)
		require.Empty(t, named(replayed, "stripe charge"), "a replay runs nothing")
	})

	t.Run("ResumedByTheCompleter", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		key := apitest.NewKey()
		s.Fail(rides.FailBeforeCharge, func(context.Context) error { return payment.ErrUnavailable })
		resp, first := ride(t, s, key)
		require.Equal(t, http.StatusServiceUnavailable, resp.Status)
		s.Fail(rides.FailBeforeCharge, nil)
		one(t, first, "refuse 503 payment_unavailable")

		c, err := completer.New(&completer.Config{Keys: s.Keys, Service: s.Service, MinAge: time.Millisecond, RetryInterval: time.Millisecond})
		require.NoError(t, err)
		time.Sleep(10 * time.Millisecond)
		succeeded, _, err := c.RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, succeeded)

		resumed := linkedTrace(t, "resume", first)
		resume := one(t, resumed, "resume")
		require.False(t, resume.Parent.IsValid(), "the resume is a trace of its own")
		requireLinked(t, resume, first)
		one(t, resumed, "stripe charge")
		one(t, resumed, "phase ride_created -> charge_created -> finished")
	})

	t.Run("ReceiptJob", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		resp, first := ride(t, s, apitest.NewKey())
		require.Equal(t, http.StatusCreated, resp.Status)

		ctx := context.Background()
		enqueuer, err := jobs.NewEnqueuer(&jobs.EnqueuerConfig{Pool: s.Pool, Kinds: jobs.Kinds()})
		require.NoError(t, err)
		moved, err := enqueuer.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, moved)
		mailer, err := mail.NewDir(&mail.DirConfig{Dir: t.TempDir(), From: "receipts@example.com"})
		require.NoError(t, err)
		client, err := jobs.NewClient(&jobs.ClientConfig{Pool: s.Pool, Mailer: mailer})
		require.NoError(t, err)
		worked, err := jobs.WorkAvailable(ctx, client)
		require.NoError(t, err)
		require.Equal(t, 1, worked)

		name := "river.work/" + (jobs.ReceiptArgs{}).Kind()
		work := one(t, linkedTrace(t, name, first), name)
		require.NotEqual(t, first[0].SpanContext.TraceID(), work.SpanContext.TraceID(), "the job is a trace of its own, linked")
	})

	t.Run("FenceRefuses", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		key := apitest.NewKey()
		// Another request takes the key over between the claim and the
		// first phase: this one's lock token no longer matches.
		s.Fail(rides.FailAfterClaim, func(ctx context.Context) error {
			_, err := s.Pool.Exec(ctx, `UPDATE idempotency_keys SET lock_token = gen_random_uuid() WHERE idempotency_key = $1`, key)
			return err
		})
		resp, spans := ride(t, s, key)
		require.Equal(t, http.StatusConflict, resp.Status)
		phase := one(t, spans, "phase started")
		fence := one(t, spans, "fence refused")
		require.Equal(t, phase.SpanContext.SpanID(), fence.Parent.SpanID())
		require.Contains(t, fence.Status.Description, idem.ErrLockLost.Error())
		refusal := one(t, spans, "refuse 409 request_taken_over")
		require.Equal(t, "request_taken_over", attr(refusal, trace.ProblemCode).AsString())
	})
}

// ride posts a ride as the stack's user, under a client span of the
// test's own, and returns the answer and every span of the ride's trace
// once its server span has ended.
func ride(t *testing.T, s *apitest.Stack, key string) (*apitest.Response, []tracetest.SpanStub) {
	t.Helper()
	ctx, client := trace.Start(context.Background(), "client")
	resp := s.Do(t, http.MethodPost, "/rides", apitest.DefaultParams,
		"Authorization", "Bearer "+s.Token, "Idempotency-Key", key,
		"Content-Type", "application/x-www-form-urlencoded", "Traceparent", *trace.Traceparent(ctx))
	client.End()
	return resp, spansOf(t, func(span tracetest.SpanStub) bool {
		return span.SpanContext.TraceID() == client.SpanContext().TraceID() && span.Name == "POST /rides"
	})
}

// linkedTrace is every span of the trace whose span called name links to
// the trace of to, once that span has ended.
func linkedTrace(t *testing.T, name string, to []tracetest.SpanStub) []tracetest.SpanStub {
	t.Helper()
	return spansOf(t, func(span tracetest.SpanStub) bool { return span.Name == name && linksTo(span, to) })
}

// spansOf waits for the span that match accepts and returns every span
// of its trace.
func spansOf(t *testing.T, match func(tracetest.SpanStub) bool) []tracetest.SpanStub {
	t.Helper()
	var spans []tracetest.SpanStub
	require.Eventually(t, func() bool {
		all := exporter.GetSpans()
		i := slices.IndexFunc(all, match)
		if i < 0 {
			return false
		}
		spans = slices.DeleteFunc(all, func(s tracetest.SpanStub) bool {
			return s.SpanContext.TraceID() != all[i].SpanContext.TraceID()
		})
		return true
	}, 30*time.Second, 10*time.Millisecond)
	return spans
}

func named(spans []tracetest.SpanStub, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func one(t *testing.T, spans []tracetest.SpanStub, name string) tracetest.SpanStub {
	t.Helper()
	found := named(spans, name)
	var names []string
	for _, s := range spans {
		names = append(names, s.Name)
	}
	require.Len(t, found, 1, "one span %q among %q", name, names)

	return found[0]
}

// children are the spans under parent whose name starts with prefix.
func children(spans []tracetest.SpanStub, parent tracetest.SpanStub, prefix string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Parent.SpanID() == parent.SpanContext.SpanID() && strings.HasPrefix(s.Name, prefix) {
			out = append(out, s)
		}
	}
	return out
}

func attr(span tracetest.SpanStub, key attribute.Key) attribute.Value {
	for _, kv := range span.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// linksTo reports whether span links to the trace of spans.
func linksTo(span tracetest.SpanStub, spans []tracetest.SpanStub) bool {
	for _, l := range span.Links {
		if l.SpanContext.TraceID() == spans[0].SpanContext.TraceID() {
			return true
		}
	}
	return false
}

func requireLinked(t *testing.T, span tracetest.SpanStub, to []tracetest.SpanStub) {
	t.Helper()
	require.True(t, linksTo(span, to), "%s links to the trace that started the key", span.Name)
}
