// Second reading: the outcomes beyond the article, for a foreign call
// whose outcome nobody can know. A key records when its request first set
// out to make the call (AdvanceToForeignCall) and counts the attempts
// that ended in an unknown outcome (RecordUnknownOutcome); past a bound
// the endpoint sets it aside for a person (SetAside), who claims it by id
// (ClaimByID) and settles it through the endpoint's own phases, or
// reopens it (Reopen). The ride's side is rides/ambiguous.go and
// rides/settle.go.

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

// setAsideSQL is the move of a phase that sets a key ($1, held under lock
// token $2 at recovery point $3) aside with reason $4, releasing it, and appends
// the step ($5, the actor), the reason its detail. It must change the
// key's row, or the phase fails with $6: Postgres makes the check
// (idempotency_key_phase_check) because the statement's answer comes back
// with COMMIT's, too late to stop the commit.
const setAsideSQL = `
	WITH changed AS (
		UPDATE idempotency_keys
		SET attention_reason = $4::text, locked_at = NULL, lock_token = NULL,
		    steps = (CASE WHEN jsonb_array_length(steps) < 100 THEN steps
		             ELSE jsonb_build_array(steps -> 0) || jsonb_path_query_array(steps, '$[last - 97 to last]') END)
		         || (jsonb_build_object('at', clock_timestamp(), 'event', 'set_aside'::text,
		                                'recovery_point', recovery_point::text, 'actor', $5::text, 'attempt', claims)
		             || jsonb_build_object('detail', $4::text))
		WHERE id = $1 AND lock_token = $2 AND recovery_point = $3
		RETURNING 1
	)
	SELECT idempotency_key_phase_check(count(*) = 1, $6) FROM changed`

// attentionMove is the statement, with its arguments, of a move that sets
// the phase's key aside (setAsideSQL) or reopens it (reopenSQL); ok is
// false for any other move. Either goes behind the fence's row lock, never
// as the fence.
func (tx *Tx) attentionMove(out Outcome) (sql string, args []any, ok bool) {
	key, from, actor := tx.key, tx.from, tx.store.actor
	switch {
	case out.attention != "":
		return setAsideSQL, []any{key.ID, key.lockToken(), from, out.attention, actor,
			fmt.Sprintf("set key %d aside at %s", key.ID, from)}, true
	case out.reopen:
		return reopenSQL, []any{key.ID, key.lockToken(), from, actor, fmt.Sprintf("reopen key %d at %s", key.ID, from)}, true
	}
	return "", nil, false
}

// followAttention makes the in-memory key follow out, the committed move
// of a phase, when it set the key aside or reopened it; it reports whether
// it did.
func (s *Store) followAttention(key *Key, out Outcome) bool {
	switch {
	case out.attention != "":
		s.metrics.Outcome(metrics.OutcomeNeedsAttention)
		key.AttentionReason = &out.attention
	case out.reopen:
		key.AttentionReason, key.UnknownOutcomes = nil, 0
	default:
		return false
	}
	key.LockedAt, key.LockToken = nil, nil
	return true
}

// unknownOutcomeSQL counts an unknown outcome on a key ($1) this request
// still holds (lock token $2) and appends the step ($3, the actor).
const unknownOutcomeSQL = `
	UPDATE idempotency_keys
	SET unknown_outcomes = unknown_outcomes + 1,
	    steps = (CASE WHEN jsonb_array_length(steps) < 100 THEN steps
	             ELSE jsonb_build_array(steps -> 0) || jsonb_path_query_array(steps, '$[last - 97 to last]') END)
	         || jsonb_build_object('at', clock_timestamp(), 'event', 'unknown_outcome'::text,
	                               'recovery_point', recovery_point::text, 'actor', $3::text, 'attempt', claims)
	WHERE id = $1 AND lock_token = $2
	RETURNING unknown_outcomes`

// RecordUnknownOutcome counts an attempt at the foreign state mutation
// that ended in an error that may have executed, and returns the count. It
// is fenced like a phase.
func (s *Store) RecordUnknownOutcome(ctx context.Context, key *Key) (int, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := s.pool.QueryRow(ctx, unknownOutcomeSQL, key.ID, key.lockToken(), s.actor).Scan(&key.UnknownOutcomes)
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

// lockKeyByIDSQL is lockKeySQL for a key named by its id ($2), for a
// person: the key is the one the person chose, so it always matches.
const lockKeyByIDSQL = `
	SELECT id, created_at, idempotency_key, last_run_at, locked_at, lock_token,
	       request_method, request_params, request_path, origin_ip,
	       response_code, response_body, recovery_point, user_id,
	       first_foreign_attempt_at, unknown_outcomes, attention_reason, claims, identity,
	       true AS matches,
	       coalesce(locked_at > now() - $1::interval, false) AS lock_fresh
	FROM idempotency_keys
	WHERE id = $2
	FOR UPDATE`

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
		l, err := s.lockKey(ctx, tx, lockKeyByIDSQL, id)
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
// its outcome: in one fenced atomic phase, the flag cleared, the count of
// unknown outcomes started afresh, the lock released, and fn's writes,
// so that a retry or the completer runs the request again from its
// recovery point. fn may be nil.
func (s *Store) Reopen(ctx context.Context, key *Key, fn func(ctx context.Context, tx *Tx) error) error {
	return s.Phase(ctx, key, func(ctx context.Context, tx *Tx) error {
		tx.Move(Outcome{reopen: true})
		if fn == nil {
			return nil
		}
		return fn(ctx, tx)
	})
}

// reopenSQL is the move of a phase that reopens a key ($1, held under lock token $2
// at recovery point $3): the flag cleared, the count of unknown outcomes
// started afresh, the lock released and the step appended ($4, the
// actor). It must change the key's row, or the phase fails with $5 (see
// setAsideSQL).
const reopenSQL = `
	WITH changed AS (
		UPDATE idempotency_keys
		SET attention_reason = NULL, unknown_outcomes = 0, locked_at = NULL, lock_token = NULL,
		    steps = (CASE WHEN jsonb_array_length(steps) < 100 THEN steps
		             ELSE jsonb_build_array(steps -> 0) || jsonb_path_query_array(steps, '$[last - 97 to last]') END)
		         || jsonb_build_object('at', clock_timestamp(), 'event', 'reopened'::text,
		                               'recovery_point', recovery_point::text, 'actor', $4::text, 'attempt', claims)
		WHERE id = $1 AND lock_token = $2 AND recovery_point = $3
		RETURNING 1
	)
	SELECT idempotency_key_phase_check(count(*) = 1, $5) FROM changed`
