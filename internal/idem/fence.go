package idem

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rocketrides/rocketrides/internal/platform/metrics"
)

// The SQLSTATEs idempotency_key_fence raises (migration 000007).
const (
	fenceLockLost          = "RR001" // ErrLockLost
	fenceReapedPredecessor = "RR002" // errReapedPredecessor
	phaseCheckFailed       = "RR003" // a check of Tx.QueueOne
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
