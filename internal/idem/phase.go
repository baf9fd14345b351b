package idem

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Outcome is what an atomic phase decides: move to the next recovery
// point, finish the request with a response, or set it aside for a human.
type Outcome struct {
	next        RecoveryPoint
	response    Response
	foreignCall bool
	// attention, when set, is why the key is set aside (see SetAside).
	attention string
	// createdFrom, when set, is the sequence the id of what the request
	// created came from (see CreatedLast).
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

// PhaseFunc is the body of an atomic phase: the writes it queues on tx
// and where the request goes next.
type PhaseFunc func(ctx context.Context, tx *Tx) (Outcome, error)

// Phase runs fn and records its outcome on key in one transaction, so the
// phase's writes and the new recovery point commit together or not at
// all. The transaction opens with the fence: it locks the key's row only
// if the key still carries this request's lock token and is still at the
// recovery point the phase started from; otherwise it rolls back and Phase
// returns ErrLockLost. Serialization failures and deadlocks run the whole
// phase again, a bounded number of times.
func (s *Store) Phase(ctx context.Context, key *Key, fn PhaseFunc) error {
	defer s.metrics.PhaseDone(string(key.RecoveryPoint), time.Now())
	return s.retryPhase(ctx, key, fn, 1, nil)
}

// queuePhase queues, on tx, the atomic phase fn of key from recovery point
// from: BEGIN, the fence, fn's statements, the statement that records the
// outcome on the key, and COMMIT. Nothing is sent but what fn flushes.
//
// The fence goes out with the phase's statements, and COMMIT right after
// them: the fence raises when the key no longer carries this request's
// lock token and recovery point (see fenceError), which aborts the
// transaction, so nothing queued after it can commit whatever its answer.
// A phase therefore costs one round trip unless fn needs an answer on the
// way (Flush).
//
// From started, the fence also makes sure the key has no reaped
// predecessor. A claim whose insert ran in the very instant the reaper
// deleted the key's earlier row (the insert waits for the deleted row and
// then proceeds, its guard having read reaped_keys before the reaper
// committed) is caught here, before its request does anything: the fence
// reads after the reaper's commit.
func (s *Store) queuePhase(ctx context.Context, tx *Tx, key *Key, from RecoveryPoint, fn PhaseFunc) (*queuedPhase, error) {
	tx.Queue(`BEGIN`)
	tx.Queue(`SELECT idempotency_key_fence($1, $2, $3)`, key.ID, key.lockToken(), from)
	out, err := fn(ctx, tx)
	if err != nil {
		return nil, err
	}
	var q *queuedPhase
	switch {
	case out.attention != "":
		q = s.queueSetAside(ctx, tx, key, from, out.attention)
	case out.reopen:
		q = s.queueReopen(ctx, tx, key, from)
	default:
		q = s.queueAdvance(ctx, tx, key, from, out)
	}
	tx.Queue(`COMMIT`).Exec(func(tag pgconn.CommandTag) error {
		if tag.String() != "COMMIT" {
			return pgx.ErrTxCommitRollback
		}
		q.committed = true
		return nil
	})
	return q, nil
}

// queueAdvance records out on key: its next recovery point, or its
// response.
func (s *Store) queueAdvance(ctx context.Context, tx *Tx, key *Key, from RecoveryPoint, out Outcome) *queuedPhase {
	var code *int
	var body []byte
	if out.next == Finished {
		code, body = &out.response.Code, out.response.Body
	}
	var (
		stored                []byte
		firstForeignAttemptAt *time.Time
	)
	// Under the fence's row lock this matches; its conditions repeat the
	// fence's so that the statement is correct on its own. Intermediate
	// phases refresh locked_at as a heartbeat; finishing releases the lock.
	//
	// The step goes in the same statement. A phase commits on a key set
	// aside only when a person took the key to settle it (nothing else
	// works such a key), so the phase also clears the flag.
	tx.Queue(`
		UPDATE idempotency_keys
		SET recovery_point = $4,
		    response_code  = $5,
		    response_body  = $6,
		    locked_at      = CASE WHEN $4 = 'finished' THEN NULL ELSE now() END,
		    lock_token     = CASE WHEN $4 = 'finished' THEN NULL ELSE lock_token END,
		    first_foreign_attempt_at = CASE WHEN $7 THEN coalesce(first_foreign_attempt_at, now())
		                                    ELSE first_foreign_attempt_at END,
		    resource_id    = coalesce(currval($9::text::regclass), resource_id),
		    attention_reason = NULL,
		    steps          = `+step("'reached'", "$4", "$8", "claims")+`
		WHERE id = $1 AND lock_token = $2 AND recovery_point = $3
		RETURNING response_body, first_foreign_attempt_at`,
		key.ID, key.lockToken(), from, out.next, code, body, out.foreignCall, s.actor, out.createdFrom,
	).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&stored, &firstForeignAttemptAt); err != nil {
			return fmt.Errorf("advance key %d from %s to %s: %w", key.ID, from, out.next, err)
		}
		return nil
	})
	return &queuedPhase{next: out.next, locked: out.next != Finished, settle: func() {
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

// Unlock releases key after a failure so that a retry need not wait for
// the lock to go stale. It keeps the recovery point: the retry resumes
// where this request stopped. The lock is released only if this request
// still holds it. Unlock runs even if ctx was cancelled (the client hung
// up), since that is exactly when a retry is coming.
func (s *Store) Unlock(ctx context.Context, key *Key) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `
		UPDATE idempotency_keys
		SET locked_at = NULL, lock_token = NULL,
		    steps = `+step("'unlocked'", "recovery_point", "$3", "claims")+`
		WHERE id = $1 AND lock_token = $2`,
		key.ID, key.lockToken(), s.actor,
	); err != nil {
		return fmt.Errorf("unlock idempotency key %d: %w", key.ID, err)
	}
	return nil
}
