// Second reading: the ride request's spans (package trace of the
// platform), which the DAG does not need. Create's claim is a span, a
// replay and a refusal are spans under the request's, and the completer's
// Resume is a span of its own; whichever finds a key an earlier request
// started links to that request's trace (idem.Store.TraceOf), so that a
// ride's traces reach one another however far apart in time.

package rides

import (
	"context"
	"log/slog"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/platform/trace"
)

// startClaim starts the span of the claim of a request of user's.
func startClaim(ctx context.Context, userID int64) (context.Context, trace.Span) {
	if !trace.On() {
		return ctx, trace.None // no attributes to build
	}
	return trace.Start(ctx, "claim", trace.User(userID))
}

// endClaim ends span, the claim that returned key (nil when it refused or
// failed) with replayed and err. A key an earlier request started, one
// now resumed or replayed, links to that request's trace, and a replay is
// a span of its own.
func (s *Service) endClaim(ctx context.Context, span trace.Span, key *idem.Key, replayed bool, err error) {
	defer func() { trace.End(span, err) }()
	if key == nil || !span.IsRecording() {
		return
	}
	outcome := "new"
	switch {
	case replayed:
		outcome = "replay"
	case key.Claims > 1:
		outcome = "resume"
	}
	span.SetAttributes(append(trace.Key(key.ID, key.UserID), trace.Outcome.String(outcome))...)
	if outcome == "new" {
		return
	}
	if !replayed {
		s.linkOrigin(ctx, key, span)
		return
	}
	_, replay := trace.Start(ctx, "replay", append(trace.Key(key.ID, key.UserID), trace.ResponseStatus.Int(key.Response().Code))...)
	s.linkOrigin(ctx, key, span, replay)
	replay.End()
}

// startResume starts the span of the completer's resume of key, linked
// to the request that started it.
func (s *Service) startResume(ctx context.Context, key *idem.Key) (context.Context, trace.Span) {
	if !trace.On() {
		return ctx, trace.None
	}
	ctx, span := trace.Start(ctx, "resume", append(trace.Key(key.ID, key.UserID), trace.From.String(string(key.RecoveryPoint)))...)
	s.linkOrigin(ctx, key, span)
	return ctx, span
}

// linkOrigin links spans to the trace of the request that started key,
// read once for them all. A trace that cannot be read is logged and
// otherwise harmless.
func (s *Service) linkOrigin(ctx context.Context, key *idem.Key, spans ...trace.Span) {
	tp, err := s.keys.TraceOf(ctx, key)
	if err != nil {
		s.logger.WarnContext(ctx, "Reading the trace a key started in failed", slog.Int64("idempotency_key_id", key.ID), slog.Any("error", err))
	}
	for _, span := range spans {
		trace.Link(span, tp)
	}
}
