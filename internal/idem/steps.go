// Second reading: each key's story, for the console. A request's story
// is the steps its key took: every claim, every atomic phase, every
// unknown outcome, set-aside and unlock, each with the time, the process
// (Config.Actor) and the attempt (Key.Claims) it belongs to. Each step is
// appended to the key's own row (idempotency_keys.steps) by the statement
// that takes it, so recording it costs the request no round trip, and no
// row or index entry of its own. The steps go with their key when the
// reaper deletes it.

package idem

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// StepEvent is what happened to a key in a step.
type StepEvent string

// The events of a key's steps.
const (
	// StepClaimed: a new key, claimed by its first request.
	StepClaimed StepEvent = "claimed"
	// StepResumed: a released key claimed again (a retry, the completer,
	// a person).
	StepResumed StepEvent = "resumed"
	// StepTookOver: a stale lock taken over; whoever held it is fenced
	// off.
	StepTookOver StepEvent = "took_over"
	// StepReached: an atomic phase committed and reached the step's
	// recovery point.
	StepReached StepEvent = "reached"
	// StepUnknownOutcome: the foreign call ended with an outcome nobody
	// can know (see RecordUnknownOutcome).
	StepUnknownOutcome StepEvent = "unknown_outcome"
	// StepSetAside: set aside for a person; Detail says why.
	StepSetAside StepEvent = "set_aside"
	// StepUnlocked: released after a failure, for a retry to resume.
	StepUnlocked StepEvent = "unlocked"
	// StepReopened: a person cleared the set-aside so that another
	// attempt may run (see Reopen).
	StepReopened StepEvent = "reopened"
)

// Step is one of a key's steps.
type Step struct {
	At            time.Time     `db:"at"`
	Event         StepEvent     `db:"event"`
	RecoveryPoint RecoveryPoint `db:"recovery_point"`
	Actor         string        `db:"actor"`
	Attempt       int           `db:"attempt"`
	Detail        *string       `db:"detail"`
}

// MaxSteps bounds the steps a key keeps. A key the completer retries every
// minute through a long Stripe outage takes two steps a minute until it is
// reaped; each step rewrites the key's row, steps and all, so without a
// bound every attempt would write more than the one before.
//
// Every statement that takes a step appends it to the key's steps in its
// own SET, spelled out whole where the statement is defined:
//
//	steps = (CASE WHEN jsonb_array_length(steps) < 100 THEN steps
//	         ELSE jsonb_build_array(steps -> 0) || jsonb_path_query_array(steps, '$[last - 97 to last]') END)
//	     || jsonb_build_object('at', clock_timestamp(), 'event', <event>::text,
//	                           'recovery_point', <point>::text, 'actor', <actor>::text, 'attempt', <attempt>)
//
// that is, all the steps, or past MaxSteps the first (how the request
// began) and the latest, leaving room for the next; then the step, whose
// point is the recovery point after it. Inside an UPDATE's SET every
// column is the row's value before the update. A test holds every such
// statement to this expression and to MaxSteps.
const MaxSteps = 100

// Steps returns the steps key keyID took, oldest first.
func (s *Store) Steps(ctx context.Context, keyID int64) ([]Step, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT (s.step->>'at')::timestamptz AS at,
		       s.step->>'event' AS event,
		       s.step->>'recovery_point' AS recovery_point,
		       s.step->>'actor' AS actor,
		       (s.step->>'attempt')::int AS attempt,
		       s.step->>'detail' AS detail
		FROM idempotency_keys k
		CROSS JOIN LATERAL jsonb_array_elements(k.steps) WITH ORDINALITY AS s(step, n)
		WHERE k.id = $1
		ORDER BY s.n`, keyID)
	if err != nil {
		return nil, fmt.Errorf("read steps of key %d: %w", keyID, err)
	}
	steps, err := pgx.CollectRows(rows, pgx.RowToStructByName[Step])
	if err != nil {
		return nil, fmt.Errorf("read steps of key %d: %w", keyID, err)
	}
	return steps, nil
}
