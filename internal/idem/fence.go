// Second reading: the fence of an atomic phase. A plain SELECT locks the
// key's row only if the key still carries the phase's lock token and is
// still at the recovery point the phase started from; otherwise it calls
// the schema's idempotency_key_fence_refuse, which raises with a SQLSTATE
// of our own, and the raise aborts the transaction. Because it raises
// rather than answers, nothing queued after a failed fence can commit, and
// a phase goes out whole without waiting for it (pipeline.go). The plpgsql
// runs only to refuse: a phase whose key is still its own pays for a row
// lock, not a function call (docs/scaling.md, "Postgres's cost per ride").
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

// fenceSQL is the fence of a phase of key $1 under lock token $2 from
// recovery point $3, other than started: it locks the key's row and
// returns nothing, or refuses. The row is counted, so that a key that is
// no longer the phase's still yields the one row that calls the refusal.
const fenceSQL = `
	SELECT idempotency_key_fence_refuse($1, $3, false)
	FROM (SELECT count(*) AS held
	      FROM (SELECT FROM idempotency_keys
	            WHERE id = $1 AND lock_token = $2 AND recovery_point = $3
	            FOR UPDATE) k) f
	WHERE f.held = 0`

// fenceFromStartedSQL is fenceSQL from started, where the key must also
// have no reaped predecessor (its record in reaped_keys). A statement of
// its own, so that each keeps one plan whatever the recovery point.
const fenceFromStartedSQL = `
	SELECT idempotency_key_fence_refuse($1, $3, f.reaped)
	FROM (SELECT count(*) AS held,
	             coalesce(bool_or(EXISTS (
	                 SELECT 1 FROM reaped_keys r
	                 WHERE r.user_id = k.user_id AND r.idempotency_key = k.idempotency_key)), false) AS reaped
	      FROM (SELECT user_id, idempotency_key FROM idempotency_keys
	            WHERE id = $1 AND lock_token = $2 AND recovery_point = $3
	            FOR UPDATE) k) f
	WHERE f.held = 0 OR f.reaped`

// queueFence queues, on tx, the fence of a phase of key from recovery
// point from.
func queueFence(tx *Tx, key *Key, from RecoveryPoint) {
	sql := fenceSQL
	if from == Started {
		sql = fenceFromStartedSQL
	}
	tx.Queue(sql, key.ID, key.lockToken(), string(from))
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
