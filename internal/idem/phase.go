// First reading: an atomic phase. One transaction holds the endpoint's
// writes and the statement that moves the key to its next recovery point
// (or stores its response), which goes first and is the fence: they
// commit together or not at all. And Unlock, which releases a key after a
// failure so that a retry resumes from the last recovery point.
//
// Left to a second reading: how a phase goes to Postgres in one round
// trip, two phases in one pipeline, and the retries after a serialization
// failure (pipeline.go); the fence's SQL and its errors (fence.go); the
// outcomes beyond the article, a key set aside for a person or reopened
// and the time of the first foreign call (attention.go), and the id of
// what the request created (tombstone.go); the steps (steps.go).

package idem

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Outcome is what an atomic phase decides: move to the next recovery
// point, finish the request with a response, or set it aside for a human.
type Outcome struct {
	next     RecoveryPoint
	response Response
	// foreignCall records the first foreign call's time (see
	// AdvanceToForeignCall).
	foreignCall bool
	// attention, when set, is why the key is set aside (see SetAside).
	attention string
	// createdFrom, when set, is the sequence the id of what the request
	// created came from (see Creates).
	createdFrom *string
	// reopen clears a set-aside and releases the key (see Reopen).
	reopen bool
}

// Advance moves the key to recovery point next.
func Advance(next RecoveryPoint) Outcome { return Outcome{next: next} }

// Respond finishes the key, storing the response that every retry of the
// request will replay. Used for success and for final errors alike (a
// declined card is declined on every retry).
func Respond(code int, body []byte) Outcome {
	return Outcome{next: Finished, response: Response{Code: code, Body: body}}
}

// PhaseFunc is the body of an atomic phase. It says first where the key
// goes (tx.Move), then queues its writes on tx, in the order Postgres is to
// receive them.
type PhaseFunc func(ctx context.Context, tx *Tx) error

// Phase runs fn and records its outcome on key in one transaction, so the
// phase's writes and the new recovery point commit together or not at
// all. The transaction opens with the fence, most often the move itself:
// it changes the key only if the key still carries this request's lock
// token and is still at the recovery point the phase started from;
// otherwise it rolls back and Phase returns ErrLockLost. Serialization
// failures and deadlocks run the whole phase again, a bounded number of
// times.
func (s *Store) Phase(ctx context.Context, key *Key, fn PhaseFunc) error {
	defer s.metrics.PhaseDone(string(key.RecoveryPoint), time.Now())
	return s.retryPhase(ctx, key, fn, 1, nil)
}

// Move says where the phase takes the key: its next recovery point, or the
// response that finishes it (or, beyond the article, a set-aside or a
// reopening: attention.go). A phase says it once, and first where it
// can: sent ahead of the phase's writes, the move is the phase's fence,
// and a phase that creates (Creates) must say it first, since its writes
// take the id the move draws.
func (tx *Tx) Move(out Outcome) {
	if tx.moved != nil {
		tx.fail(fmt.Errorf("bug: phase at %s for key %d moves twice", tx.from, tx.key.ID))
		return
	}
	switch {
	case out.attention != "":
		tx.moved = tx.store.queueSetAside(tx, out.attention)
	case out.reopen:
		tx.moved = tx.store.queueReopen(tx)
	default:
		tx.moved = tx.store.queueAdvance(tx, out)
	}
}

// queuePhase queues, on tx, the atomic phase fn of key from recovery point
// from: BEGIN, fn's statements, the fence ahead of the first of them (most
// often the move itself), and COMMIT. Nothing is sent but what fn
// flushes.
func (s *Store) queuePhase(ctx context.Context, tx *Tx, key *Key, from RecoveryPoint, fn PhaseFunc) (*queuedPhase, error) {
	tx.batch.Queue(`BEGIN`)
	// The fence goes right after BEGIN: it goes on only if the key still
	// carries this request's lock token and recovery point, and otherwise
	// raises, which aborts the transaction. Nothing queued after it can
	// commit, so the phase sends its writes and COMMIT without waiting for
	// the fence's answer. When the phase's first statement is its move,
	// the move is the fence.
	tx.openFence(s, key, from)
	if err := fn(ctx, tx); err != nil {
		return nil, err
	}
	q := tx.moved
	switch {
	case tx.err != nil:
		return nil, tx.err
	case q == nil:
		return nil, fmt.Errorf("bug: phase at %s for key %d says no move", from, key.ID)
	}
	tx.queueCommit(&q.committed)
	return q, nil
}

// advanceSQL moves a key ($1, held under lock token $2 at recovery point
// $3) to its next recovery point $4, or finishes it with the response $5,
// $6. It goes first and is the phase's fence: fencedAdvanceSQL (fence.go)
// wraps it so that, should it change no row, it refuses the phase.
// Intermediate phases refresh locked_at as a heartbeat; finishing releases
// the lock.
//
// The same statement records what the extensions need: the first foreign
// call's time ($7, attention.go), the id of what the phase creates, drawn
// here from its sequence ($9, tombstone.go) and the step ($8, the actor;
// steps.go). A phase commits on a key set aside only when a person took
// the key to settle it (nothing else works such a key), so it also clears
// the flag.
const advanceSQL = `
	UPDATE idempotency_keys
	SET recovery_point = $4::text,
	    response_code  = $5,
	    response_body  = $6,
	    locked_at      = CASE WHEN $4 = 'finished' THEN NULL ELSE now() END,
	    lock_token     = CASE WHEN $4 = 'finished' THEN NULL ELSE lock_token END,
	    first_foreign_attempt_at = CASE WHEN $7 THEN coalesce(first_foreign_attempt_at, now())
	                                    ELSE first_foreign_attempt_at END,
	    resource_id    = CASE WHEN $9::text IS NULL THEN resource_id ELSE nextval($9::text::regclass) END,
	    attention_reason = NULL,
	    steps = (CASE WHEN jsonb_array_length(steps) < 100 THEN steps
	             ELSE jsonb_build_array(steps -> 0) || jsonb_path_query_array(steps, '$[last - 97 to last]') END)
	         || jsonb_build_object('at', clock_timestamp(), 'event', 'reached'::text,
	                               'recovery_point', $4::text, 'actor', $8::text, 'attempt', claims)
	WHERE id = $1 AND lock_token = $2 AND recovery_point = $3::text
	RETURNING response_body, first_foreign_attempt_at`

// queueAdvance queues the move of the phase's key (advanceSQL): its next
// recovery point, or its response. It is the phase's fence when it is the
// phase's first statement.
func (s *Store) queueAdvance(tx *Tx, out Outcome) *queuedPhase {
	key, from := tx.key, tx.from
	var code *int
	var body json.RawMessage
	if out.next == Finished {
		code, body = &out.response.Code, out.response.Body
	}
	var (
		stored                []byte
		firstForeignAttemptAt *time.Time
	)
	sql := advanceSQL
	switch {
	case tx.fenceFirst():
		sql = fencedAdvanceSQL
	case out.createdFrom != nil:
		tx.fail(fmt.Errorf("bug: phase at %s for key %d creates from %s but its move is not its first statement",
			from, key.ID, *out.createdFrom))
		return nil
	}
	tx.batch.Queue(sql,
		key.ID, key.lockToken(), from, out.next, code, body, out.foreignCall, s.actor, out.createdFrom,
	).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&stored, &firstForeignAttemptAt); err != nil {
			return fmt.Errorf("advance key %d from %s to %s: %w", key.ID, from, out.next, err)
		}
		return nil
	})
	return &queuedPhase{next: out.next, locked: out.next != Finished, advances: true, settle: func(ctx context.Context) {
		// Committed: only now may the in-memory key follow.
		key.RecoveryPoint = out.next
		key.AttentionReason = nil
		key.FirstForeignAttemptAt = firstForeignAttemptAt
		if out.next == Finished {
			code := out.response.Code
			// The stored body is what Postgres gives back (JSONB's own
			// rendering), so this first response and every replay are
			// the same bytes.
			key.ResponseCode, key.ResponseBody = &code, stored
			key.LockedAt, key.LockToken = nil, nil
		}
		annotate(ctx, key)
	}}
}

// unlockSQL releases a key ($1) if this request still holds it (lock
// token $2), keeping its recovery point, and appends the step ($3, the
// actor; steps.go).
const unlockSQL = `
	UPDATE idempotency_keys
	SET locked_at = NULL, lock_token = NULL,
	    steps = (CASE WHEN jsonb_array_length(steps) < 100 THEN steps
	             ELSE jsonb_build_array(steps -> 0) || jsonb_path_query_array(steps, '$[last - 97 to last]') END)
	         || jsonb_build_object('at', clock_timestamp(), 'event', 'unlocked'::text,
	                               'recovery_point', recovery_point::text, 'actor', $3::text, 'attempt', claims)
	WHERE id = $1 AND lock_token = $2`

// Unlock releases key after a failure so that a retry need not wait for
// the lock to go stale. It keeps the recovery point: the retry resumes
// where this request stopped. The lock is released only if this request
// still holds it. Unlock runs even if ctx was cancelled (the client hung
// up), since that is exactly when a retry is coming.
func (s *Store) Unlock(ctx context.Context, key *Key) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, unlockSQL, key.ID, key.lockToken(), s.actor); err != nil {
		return fmt.Errorf("unlock idempotency key %d: %w", key.ID, err)
	}
	return nil
}
