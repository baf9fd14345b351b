// Second reading: the fence of an atomic phase, its first statement. It
// takes the key's row lock only if the key still carries the phase's lock
// token and is still at the recovery point the phase started from;
// otherwise it calls the schema's idempotency_key_fence_refuse, which
// raises with a SQLSTATE of our own, and the raise aborts the transaction.
// Because it raises rather than answers, nothing queued after a failed
// fence can commit, and a phase goes out whole without waiting for it
// (pipeline.go). The plpgsql runs only to refuse.
//
// A phase says its move first where it can (phase.go, Tx.Move), and then
// the move is the fence: advanceSQL, made the fence by fencedAdvanceSQL,
// a statement fewer per phase (docs/scaling.md, "Postgres's cost per
// ride"). A phase whose first statement is another (it reads before it
// knows its move, or it sets the key aside or reopens it) opens with a
// lock of the key's row instead (fenceLockSQL), placed ahead of that
// statement. Nothing is reordered: Postgres receives a phase's statements
// in the order the phase function says them.
//
// From started, the fence also makes sure the key has no reaped
// predecessor. A claim whose insert ran in the very instant the reaper
// deleted the key's earlier row (the insert waits for the deleted row and
// then proceeds, its guard having read reaped_keys before the reaper
// committed) is caught here, before its request does anything: the fence
// reads after the reaper's commit (tombstone.go).

package idem

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rocketrides/rocketrides/internal/platform/metrics"
)

// fenceLockSQL is the fast path's fence of a phase of key $1 under lock
// token $2 from recovery point $3 that does not open with its move: it locks the key's
// row and returns nothing, or refuses. The row is counted, so that a key
// that is no longer the phase's still yields the one row that calls the
// refusal.
const fenceLockSQL = `
	SELECT idempotency_key_fence_refuse($1, $3, f.reaped)
	FROM (SELECT count(*) AS held,
	             coalesce(bool_or($3 = 'started' AND EXISTS (
	                 SELECT 1 FROM reaped_keys r
	                 WHERE r.user_id = k.user_id AND r.idempotency_key = k.idempotency_key)), false) AS reaped
	      FROM (SELECT user_id, idempotency_key FROM idempotency_keys
	            WHERE id = $1 AND lock_token = $2 AND recovery_point = $3::text
	            FOR UPDATE) k) f
	WHERE f.held = 0 OR f.reaped`

// fencedAdvanceSQL is advanceSQL, the move of key $1 under lock token $2
// from recovery point $3, as the phase's fence: it refuses the phase when
// the move is not the phase's, when it changed no row or, from started,
// when the key has a reaped predecessor. The refusal raises, so the move
// itself rolls back with the rest; the reaped_keys probe runs only from
// started.
const fencedAdvanceSQL = `
	WITH moved AS (` + advanceSQL + `)
	SELECT * FROM moved
	UNION ALL
	SELECT moved.* FROM (
		SELECT idempotency_key_fence_refuse($1, $3::text, f.reaped)
		FROM (SELECT count(*) AS held,
		             $3::text = 'started' AND EXISTS (
		                 SELECT 1 FROM idempotency_keys k JOIN reaped_keys r USING (user_id, idempotency_key)
		                 WHERE k.id = $1) AS reaped
		      FROM moved) f
		WHERE f.held = 0 OR f.reaped
	) refused LEFT JOIN moved ON false`

// openFence opens the phase of key from recovery point from, whose fence
// goes out ahead of its first statement: the move, when the move is that
// statement (fenceFirst), or else a lock of the key's row (lockFirst).
func (tx *Tx) openFence(s *Store, key *Key, from RecoveryPoint) {
	tx.store, tx.key, tx.from, tx.moved = s, key, from, nil
	tx.fencePending = true
}

// lockFirst sends the pending fence, if any, as a lock of the key's row:
// for a phase whose first statement is not its move (Queue, Flush and the
// set-aside and reopen moves call it). It does nothing once the fence is
// placed.
func (tx *Tx) lockFirst() {
	if !tx.fencePending {
		return
	}
	tx.fencePending = false
	tx.batch.Queue(fenceLockSQL, tx.key.ID, tx.key.lockToken(), string(tx.from))
}

// fenceFirst reports whether the fence is still pending, and so whether
// the move about to be queued is the phase's first statement and its
// fence; it places the fence.
func (tx *Tx) fenceFirst() bool {
	pending := tx.fencePending
	tx.fencePending = false
	return pending
}

// The SQLSTATEs of the schema's plpgsql: the fence's, and a phase's own check.
const (
	fenceLockLost          = "RR001" // ErrLockLost
	fenceReapedPredecessor = "RR002" // errReapedPredecessor
	phaseCheckFailed       = "RR003" // a statement's own check, idempotency_key_phase_check
)

// fenceError is err, a phase's failure, as the fence's finding when the
// fence is what failed: the fence raises, so its error comes back first
// and every statement after it, COMMIT included, was skipped.
func (s *Store) fenceError(key *Key, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case fenceLockLost:
		s.metrics.Outcome(metrics.OutcomeLockLost)
		return fmt.Errorf("fence key %d at %s: %w", key.ID, key.RecoveryPoint, ErrLockLost)
	case fenceReapedPredecessor:
		return fmt.Errorf("fence key %d at %s: %w", key.ID, key.RecoveryPoint, errReapedPredecessor)
	case phaseCheckFailed:
		return fmt.Errorf("phase at %s for key %d: %s", key.RecoveryPoint, key.ID, pgErr.Message)
	}
	return err
}
