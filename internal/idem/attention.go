package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rocketrides/rocketrides/internal/platform/metrics"
)

// ErrNeedsAttention means the key was set aside for a human: its
// outcome could not be settled automatically.
var ErrNeedsAttention = errors.New("idempotency key needs human attention")

// AdvanceToForeignCall moves the key to recovery point next, from which
// the request makes its foreign state mutation, and records (once) when it
// first set out to. A retry long after that time knows the provider may
// have forgotten the attempt. Recording it in the phase's own statement
// costs the request no extra round trip.
func AdvanceToForeignCall(next RecoveryPoint) Outcome { return Outcome{next: next, foreignCall: true} }

// SetAside sets the key aside for a human, with reason, and releases it.
// The key keeps its recovery point, so once a person has settled the
// outcome (say, found the charge at Stripe and recorded it) clearing
// attention_reason lets a retry or the completer finish it; until then
// neither works it. Decided in a phase, the flag commits together with
// the phase's writes (the endpoint's own record of why its resource
// waits for a person).
func SetAside(reason string) Outcome { return Outcome{attention: reason} }

// queueSetAside ends a phase that sets key aside (see SetAside): the flag,
// under the fence's row lock.
func (s *Store) queueSetAside(ctx context.Context, tx *Tx, key *Key, from RecoveryPoint, reason string) *queuedPhase {
	tx.QueueOne(fmt.Sprintf("set key %d aside at %s", key.ID, from), `
		UPDATE idempotency_keys
		SET attention_reason = $4, locked_at = NULL, lock_token = NULL,
		    steps = `+keptSteps+` || (`+stepObject("'set_aside'", "recovery_point", "$5", "claims")+`
		                      || jsonb_build_object('detail', $4::text))
		WHERE id = $1 AND lock_token = $2 AND recovery_point = $3`,
		key.ID, key.lockToken(), from, reason, s.actor)
	return &queuedPhase{next: from, settle: func() {
		s.metrics.Outcome(metrics.OutcomeNeedsAttention)
		key.AttentionReason = &reason
		key.LockedAt, key.LockToken = nil, nil
		annotate(ctx, key)
	}}
}

// RecordUnknownOutcome counts an attempt at the foreign state mutation
// that ended in an error that may have executed, and returns the count. It
// is fenced like a phase.
func (s *Store) RecordUnknownOutcome(ctx context.Context, key *Key) (int, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := s.pool.QueryRow(ctx, `
		UPDATE idempotency_keys
		SET unknown_outcomes = unknown_outcomes + 1,
		    steps = `+step("'unknown_outcome'", "recovery_point", "$3", "claims")+`
		WHERE id = $1 AND lock_token = $2
		RETURNING unknown_outcomes`,
		key.ID, key.lockToken(), s.actor,
	).Scan(&key.UnknownOutcomes)
	if errors.Is(err, pgx.ErrNoRows) {
		s.metrics.Outcome(metrics.OutcomeLockLost)
		return 0, fmt.Errorf("record unknown outcome on key %d: %w", key.ID, ErrLockLost)
	}
	if err != nil {
		return 0, fmt.Errorf("record unknown outcome on key %d: %w", key.ID, err)
	}
	return key.UnknownOutcomes, nil
}

// ErrKeyFinished means the key has its response stored: there is nothing
// left to settle.
var ErrKeyFinished = errors.New("idempotency key is finished")

// ClaimByID claims key id for a person who settles it by hand (the
// console), with the same rules as a request's claim: a key someone else
// holds under a live lock is refused (ErrInFlight), a stale lock is taken
// over and its holder fenced off, and a finished key is refused
// (ErrKeyFinished). check, if not nil, sees the key first, locked: an
// error from it refuses the claim, and nothing is written. The key comes
// back locked with a fresh token, for Phase, or for Reopen; the caller
// unlocks it on failure.
func (s *Store) ClaimByID(ctx context.Context, id int64, check func(*Key) error) (*Key, error) {
	var (
		key     *Key
		outcome *metrics.Outcome
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		l, err := s.lockKey(ctx, tx, `id = $2`, `true`, id)
		switch {
		case errors.Is(err, errNoKey):
			return fmt.Errorf("key %d: %w", id, ErrKeyNotFound)
		case err != nil:
			return err
		case l.RecoveryPoint == Finished:
			return fmt.Errorf("key %d: %w", id, ErrKeyFinished)
		case l.LockFresh:
			outcome = new(metrics.OutcomeInFlightConflict)
			return fmt.Errorf("key %d: %w", id, ErrInFlight)
		}
		if check != nil {
			if err := check(&l.Key); err != nil {
				return err
			}
		}
		var taken metrics.Outcome
		if key, taken, err = s.take(ctx, tx, &l.Key); err == nil {
			outcome = &taken
		}
		return err
	})
	if outcome != nil {
		s.metrics.Outcome(*outcome)
	}
	if err != nil {
		return nil, err
	}
	annotate(ctx, key)
	return key, nil
}

// Reopen ends a person's settlement of a key set aside without settling
// its outcome: in one fenced atomic phase, fn's writes, the flag cleared,
// the count of unknown outcomes started afresh and the lock released, so
// that a retry or the completer runs the request again from its recovery
// point. fn may be nil.
func (s *Store) Reopen(ctx context.Context, key *Key, fn func(ctx context.Context, tx *Tx) error) error {
	return s.Phase(ctx, key, func(ctx context.Context, tx *Tx) (Outcome, error) {
		if fn != nil {
			if err := fn(ctx, tx); err != nil {
				return Outcome{}, err
			}
		}
		return Outcome{reopen: true}, nil
	})
}

// queueReopen ends a phase that reopens key (see Reopen).
func (s *Store) queueReopen(ctx context.Context, tx *Tx, key *Key, from RecoveryPoint) *queuedPhase {
	tx.QueueOne(fmt.Sprintf("reopen key %d at %s", key.ID, from), `
		UPDATE idempotency_keys
		SET attention_reason = NULL, unknown_outcomes = 0, locked_at = NULL, lock_token = NULL,
		    steps = `+step("'reopened'", "recovery_point", "$4", "claims")+`
		WHERE id = $1 AND lock_token = $2 AND recovery_point = $3`,
		key.ID, key.lockToken(), from, s.actor)
	return &queuedPhase{next: from, settle: func() {
		key.AttentionReason, key.UnknownOutcomes = nil, 0
		key.LockedAt, key.LockToken = nil, nil
		annotate(ctx, key)
	}}
}
