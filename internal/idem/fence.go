// Second reading: the fence of an atomic phase, idempotency_key_fence, a
// plpgsql function in the schema. It locks the key's row only if the key
// still carries the phase's lock token and is still at the recovery point
// the phase started from; otherwise it raises, with a SQLSTATE of our own,
// and the raise aborts the transaction. Because it raises rather than
// answers, nothing queued after a failed fence can commit, and a phase
// goes out whole without waiting for it (pipeline.go).
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
