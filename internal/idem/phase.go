// First reading: an atomic phase, as Postgres receives it. BEGIN; the
// fence, an UPDATE that changes the key only if it still carries this
// request's lock token and recovery point (no row: the lock is lost, and
// everything rolls back); the phase function's statements, each on its
// own and in the order it says them, its move to the next recovery point
// (or its stored response) first; COMMIT. And Unlock, which releases a
// key after a failure so that a retry resumes from the last recovery point.
//
// Left to a second reading: the fast path, the default, a phase in one
// round trip, its move as the fence (phasePipelined, queuePipelined,
// flushPipelined, movePipelined: pipeline.go, fence.go); retries after a
// deadlock (Store.retry); a reaped predecessor (errReapedPredecessor); a
// guard (Tx.Guard); a set-aside (attentionMove, followAttention); what
// follows the commit (behindCommitFailed); the steps; the metrics
// (Idempotency.Outcome, Idempotency.PhaseDone), logs (annotate), traces
// (traceparent: trace.go) and helpers (Key.lockToken, answer).

package idem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rocketrides/rocketrides/internal/platform/metrics"
)

// Outcome is where an atomic phase takes its key.
type Outcome struct {
	next        RecoveryPoint
	response    Response
	foreignCall bool    // record the first foreign call's time (AdvanceToForeignCall)
	attention   string  // why the key is set aside (SetAside)
	createdFrom *string // the sequence of what the phase creates (Creates)
	reopen      bool    // clear a set-aside and release the key (Reopen)
}

// Advance moves the key to recovery point next.
func Advance(next RecoveryPoint) Outcome { return Outcome{next: next} }

// Respond finishes the key with the response every retry replays, for
// success and final errors alike (a card declined once always is).
func Respond(code int, body []byte) Outcome {
	return Outcome{next: Finished, response: Response{Code: code, Body: body}}
}

// PhaseFunc is the body of an atomic phase: it says where the key goes
// (tx.Move), first where it can, and queues its writes on tx.
type PhaseFunc func(ctx context.Context, tx *Tx) error

// Tx is an atomic phase's transaction. Its statements (Queue, Move) go to
// Postgres in order, at Flush and before COMMIT; the first error fails it.
type Tx struct {
	store *Store
	key   *Key
	from  RecoveryPoint // the recovery point the phase started from
	moved *move         // the phase's move, once said
	wrote bool          // a statement was queued before the move
	after []afterCommit // sent once the phase has committed
	err   error
	trace *string // the request's traceparent, for the jobs it stages (trace.go)

	tx       pgx.Tx             // the plain path's transaction
	queued   []*pgx.QueuedQuery // what the next Flush sends
	pipeline                    // the fast path's (pipeline.go)
}

// move is a phase's move (Move), and what Postgres answered to it.
type move struct {
	out                   Outcome
	stored                []byte
	firstForeignAttemptAt *time.Time
}

// Phase runs fn and records its outcome on key in one transaction, so the
// phase's writes and the new recovery point commit together or not at
// all. A phase whose key is no longer this request's returns ErrLockLost.
func (s *Store) Phase(ctx context.Context, key *Key, fn PhaseFunc) error {
	ctx, cancel := context.WithTimeout(ctx, phaseTimeout) // however silent the connection
	defer cancel()
	if !s.plain {
		return s.phasePipelined(ctx, key, fn)
	}
	defer s.metrics.PhaseDone(string(key.RecoveryPoint), time.Now())
	return s.retry(ctx, key, func(ctx context.Context, _ int) error { return s.phase(ctx, key, fn) }, 1, nil)
}

// phase makes one attempt at the atomic phase fn of key.
func (s *Store) phase(ctx context.Context, key *Key, fn PhaseFunc) error {
	tx := &Tx{store: s, key: key, from: key.RecoveryPoint, trace: traceparent(ctx)}
	err := pgx.BeginFunc(ctx, s.pool, func(ptx pgx.Tx) error { // BEGIN; COMMIT, or ROLLBACK after an error
		var reaped bool // the fence: no row, another request has the key
		err := ptx.QueryRow(ctx, fenceSQL, key.ID, key.lockToken(), key.RecoveryPoint).Scan(&reaped)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			s.metrics.Outcome(metrics.OutcomeLockLost)
			return fmt.Errorf("fence key %d at %s: %w", key.ID, key.RecoveryPoint, ErrLockLost)
		case err != nil:
			return fmt.Errorf("fence key %d at %s: %w", key.ID, key.RecoveryPoint, err)
		case reaped:
			return errReapedPredecessor
		}
		tx.tx = ptx
		if err := fn(ctx, tx); err != nil {
			return err
		}
		if tx.moved == nil {
			return fmt.Errorf("bug: phase at %s for key %d says no move", tx.from, key.ID)
		}
		return tx.Flush(ctx)
	})
	if err != nil {
		return err
	}
	for _, a := range tx.after {
		if _, err := s.pool.Exec(ctx, a.sql, a.args...); err != nil {
			s.behindCommitFailed(ctx, key, err)
		}
	}
	s.follow(ctx, key, tx.moved) // committed: only now may the in-memory key follow
	return nil
}

// fenceSQL is the fence of a phase of key $1 under lock token $2 from
// recovery point $3: it locks the key's row, or changes no row. From
// started it also says whether the reaper deleted an earlier key of the
// same user and client key (tombstone.go).
const fenceSQL = `
	UPDATE idempotency_keys k SET locked_at = now()
	WHERE id = $1 AND lock_token = $2 AND recovery_point = $3::text
	RETURNING $3::text = 'started' AND EXISTS (
		SELECT 1 FROM reaped_keys r WHERE r.user_id = k.user_id AND r.idempotency_key = k.idempotency_key)`

// Queue adds a statement to the phase, sent at the next Flush.
func (tx *Tx) Queue(sql string, args ...any) *pgx.QueuedQuery {
	tx.wrote = tx.wrote || tx.moved == nil
	if tx.batch != nil {
		return tx.queuePipelined(sql, args...)
	}
	q := &pgx.QueuedQuery{SQL: sql, Arguments: args}
	tx.queued = append(tx.queued, q)
	return q
}

// Flush sends the statements queued since the last Flush, each on its own,
// and hands each answer to its callback. It returns the first error.
func (tx *Tx) Flush(ctx context.Context) error {
	if tx.batch != nil {
		return tx.flushPipelined(ctx)
	}
	queued := tx.queued
	tx.queued = nil
	for _, q := range queued {
		if tx.err != nil {
			break
		}
		rows, err := tx.tx.Query(ctx, q.SQL, q.Arguments...)
		if err == nil {
			err = answer(q, rows)
		}
		tx.fail(err)
	}
	return tx.err
}

// fail records err, if any, as the phase's failure, unless it has one.
func (tx *Tx) fail(err error) {
	if tx.err == nil {
		tx.err = err
	}
}

// Move says where the phase takes the key (Advance, Respond). A phase
// says it once, and first where it can: one that creates (Creates) must,
// since its writes take the id the move draws.
func (tx *Tx) Move(out Outcome) {
	switch {
	case tx.moved != nil:
		tx.fail(fmt.Errorf("bug: phase at %s for key %d moves twice", tx.from, tx.key.ID))
		return
	case out.createdFrom != nil && tx.wrote:
		tx.fail(fmt.Errorf("bug: phase at %s for key %d creates from %s but its move is not its first statement",
			tx.from, tx.key.ID, *out.createdFrom))
		return
	}
	m := &move{out: out}
	tx.moved = m
	sql, args := tx.moveSQL(out)
	if tx.batch != nil {
		tx.movePipelined(m, sql, args)
		return
	}
	q := tx.Queue(sql, args...)
	if sql == advanceSQL {
		q.QueryRow(func(row pgx.Row) error { return row.Scan(&m.stored, &m.firstForeignAttemptAt) })
	}
}

// moveSQL is the statement and arguments that record out.
func (tx *Tx) moveSQL(out Outcome) (string, []any) {
	if sql, args, ok := tx.attentionMove(out); ok {
		return sql, args
	}
	var code *int
	var body json.RawMessage
	if out.next == Finished {
		code, body = &out.response.Code, out.response.Body
	}
	return advanceSQL, []any{tx.key.ID, tx.key.lockToken(), tx.from, out.next, code, body,
		out.foreignCall, tx.store.actor, out.createdFrom}
}

// advanceSQL moves a key ($1, held under lock token $2 at recovery point
// $3) to its next recovery point $4, or finishes it with the response $5,
// $6. It also records the first foreign call's time ($7), the id of what
// the phase creates ($9), drawn here, and the step ($8, the actor).
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

// follow makes the in-memory key follow m once its phase has committed.
func (s *Store) follow(ctx context.Context, key *Key, m *move) {
	defer annotate(ctx, key)
	if s.followAttention(key, m.out) {
		return
	}
	key.RecoveryPoint = m.out.next
	key.AttentionReason = nil
	key.FirstForeignAttemptAt = m.firstForeignAttemptAt
	if m.out.next == Finished {
		// Postgres's rendering: this answer and every replay are the same.
		code := m.out.response.Code
		key.ResponseCode, key.ResponseBody = &code, m.stored
		key.LockedAt, key.LockToken = nil, nil
	}
}

// unlockSQL releases a key ($1) this request holds (lock token $2).
const unlockSQL = `
	UPDATE idempotency_keys
	SET locked_at = NULL, lock_token = NULL,
	    steps = (CASE WHEN jsonb_array_length(steps) < 100 THEN steps
	             ELSE jsonb_build_array(steps -> 0) || jsonb_path_query_array(steps, '$[last - 97 to last]') END)
	         || jsonb_build_object('at', clock_timestamp(), 'event', 'unlocked'::text,
	                               'recovery_point', recovery_point::text, 'actor', $3::text, 'attempt', claims)
	WHERE id = $1 AND lock_token = $2`

// Unlock releases key after a failure: a retry resumes where this request
// stopped, even if ctx was cancelled (the client hung up).
func (s *Store) Unlock(ctx context.Context, key *Key) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, unlockSQL, key.ID, key.lockToken(), s.actor); err != nil {
		return fmt.Errorf("unlock idempotency key %d: %w", key.ID, err)
	}
	return nil
}
