// Second reading: the key store's spans (package trace of the platform),
// none of which the mechanism needs. Each atomic phase is a span named by
// the recovery points it moves the key from and to; a fence that refuses
// is a span of its own under it. The claim stores the claiming request's
// traceparent with a new key (insertKeySQL, claimFastSQL), and a phase
// hands its own to the jobs it stages (Tx.Traceparent), so that later
// work on the key, or the job, links back to it (TraceOf), and the
// console links a key's story to its trace (Traceparent).

package idem

import (
	"context"
	"errors"
	"fmt"

	"github.com/rocketrides/rocketrides/internal/platform/trace"
)

// traceparent is ctx's traceparent, stored with what a request writes;
// nil when the request is not traced.
func traceparent(ctx context.Context) *string { return trace.Traceparent(ctx) }

// Traceparent is the traceparent of the request whose phase this is, for
// a job it stages (jobs.Stage); nil when the request is not traced.
func (tx *Tx) Traceparent() *string { return tx.trace }

// startPhase starts the span of an atomic phase of key, from its
// recovery point; endPhase names it once the phase has moved the key.
func startPhase(ctx context.Context, key *Key) (context.Context, trace.Span) {
	if !trace.On() {
		return ctx, trace.None // no name or attributes to build
	}
	return trace.Start(ctx, "phase "+string(key.RecoveryPoint),
		append(trace.Key(key.ID, key.UserID), trace.From.String(string(key.RecoveryPoint)))...)
}

// endPhase ends span, the phase that moved key from from, through via on
// the fast path's pipeline of two phases ("" for one phase), to where key
// is now: "phase started -> ride_created". A phase that failed keeps its
// first name; one the fence refused gets a span saying so.
func endPhase(ctx context.Context, span trace.Span, key *Key, from, via RecoveryPoint, err error) {
	if span.IsRecording() && err == nil {
		name := "phase " + string(from)
		if via != "" {
			name += " -> " + string(via)
		}
		span.SetName(name + " -> " + string(key.RecoveryPoint))
		span.SetAttributes(trace.To.String(string(key.RecoveryPoint)))
	}
	if errors.Is(err, ErrLockLost) {
		_, fence := trace.Start(ctx, "fence refused", append(trace.Key(key.ID, key.UserID), trace.From.String(string(from)))...)
		trace.End(fence, err)
	}
	trace.End(span, err)
}

// traceOfSQL reads the traceparent of the request that claimed key $1.
const traceOfSQL = `SELECT traceparent FROM idempotency_keys WHERE id = $1`

// TraceOf returns the traceparent of the request that claimed key, for a
// span that resumes or replays it to link to; nil when that request was
// not traced, and without a query when ctx's span does not record.
func (s *Store) TraceOf(ctx context.Context, key *Key) (*string, error) {
	if !trace.Recording(ctx) {
		return nil, nil
	}
	return s.Traceparent(ctx, key.ID)
}

// Traceparent returns the traceparent of the request that claimed key
// id, whether or not ctx is traced: the console links a key's story to
// its trace. Nil when that request was not traced.
func (s *Store) Traceparent(ctx context.Context, id int64) (*string, error) {
	var tp *string
	if err := s.pool.QueryRow(ctx, traceOfSQL, id).Scan(&tp); err != nil {
		return nil, fmt.Errorf("read the trace of idempotency key %d: %w", id, err)
	}
	return tp, nil
}
