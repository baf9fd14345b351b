package trace

import (
	"context"
	"strconv"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Span is an OpenTelemetry span.
type Span = oteltrace.Span

// The attributes of the mechanism's spans. Ids only: never a token, a
// client's Idempotency-Key or a card.
const (
	KeyID          = attribute.Key("rocketrides.idempotency_key.id")
	UserID         = semconv.UserIDKey
	From           = attribute.Key("rocketrides.recovery_point.from")
	To             = attribute.Key("rocketrides.recovery_point.to")
	Outcome        = attribute.Key("rocketrides.claim.outcome")
	StripeKey      = attribute.Key("rocketrides.stripe.idempotency_key")
	ProblemCode    = attribute.Key("rocketrides.problem.code")
	ResponseStatus = semconv.HTTPResponseStatusCodeKey
	Attempts       = attribute.Key("rocketrides.phase.attempts")
)

// installed is whether Install has run: whether On.
var installed atomic.Bool

// On reports whether the process traces. Instrumentation that costs
// something even with a no-op provider (otelhttp, otelpgx, otelriver) is
// installed only when it does.
func On() bool { return installed.Load() }

// tracer is the project's own instrumentation scope.
func tracer() oteltrace.Tracer {
	return otel.Tracer("github.com/rocketrides/rocketrides")
}

// None is the span of a process that does not trace: it records nothing,
// and ending it costs nothing. A caller whose span's name or attributes
// cost something to build returns it when tracing is off (On).
var None Span = noop.Span{}

// Start starts a span of the mechanism named name, a child of ctx's;
// None when the process does not trace.
func Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, Span) {
	if !On() {
		return ctx, None
	}
	return tracer().Start(ctx, name, oteltrace.WithAttributes(attrs...))
}

// End ends span with err's outcome: an error status for a failure.
func End(span Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Key is the attributes naming an idempotency key and its user.
func Key(keyID, userID int64) []attribute.KeyValue {
	return []attribute.KeyValue{KeyID.Int64(keyID), User(userID)}
}

// User is the attribute naming a user, by id.
func User(userID int64) attribute.KeyValue { return UserID.String(strconv.FormatInt(userID, 10)) }

// Traceparent is the W3C traceparent of ctx's span, for a row that
// carries the request's trace into the future (a key, a staged job); nil
// when the span is not sampled, so nothing is stored for a trace that
// nobody will see.
func Traceparent(ctx context.Context) *string {
	if !oteltrace.SpanContextFromContext(ctx).IsSampled() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	tp := carrier["traceparent"]
	return &tp
}

// Link makes span link to the span traceparent names (Traceparent): the
// request that started a key, from its resume or its retry. A nil or
// malformed traceparent links nothing.
func Link(span Span, traceparent *string) {
	if traceparent == nil || !span.IsRecording() {
		return
	}
	if sc := spanContext(*traceparent); sc.IsValid() {
		span.AddLink(oteltrace.Link{SpanContext: sc})
	}
}

// TraceID is the id of the trace traceparent (Traceparent) belongs to,
// as trace viewers name it in their addresses (32 hex digits); "" for a
// malformed one.
func TraceID(traceparent string) string {
	if sc := spanContext(traceparent); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}

// spanContext is the span a W3C traceparent names; invalid when it is
// malformed.
func spanContext(traceparent string) oteltrace.SpanContext {
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	return oteltrace.SpanContextFromContext(ctx)
}

// Recording reports whether ctx's span records: whether reading what a
// span would link to is worth a query.
func Recording(ctx context.Context) bool {
	return oteltrace.SpanFromContext(ctx).IsRecording()
}

// Refused records, under ctx's span, the problem a request was answered
// with after its claim: a 409 or 422 the key refused, or a failure the
// request stopped on. status and code are the problem's (RFC 9457).
func Refused(ctx context.Context, status int, code string) {
	if !Recording(ctx) {
		return
	}
	_, span := Start(ctx, "refuse "+strconv.Itoa(status)+" "+code, ResponseStatus.Int(status), ProblemCode.String(code))
	span.End()
}
