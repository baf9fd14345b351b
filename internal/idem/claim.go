// First reading: the claim, the first atomic phase of every idempotent
// request. A new key is inserted, locked for its request; an existing one
// is locked FOR UPDATE and decided in the order a client needs: another
// request under the same key is refused (422), a finished key replays its
// stored response, a key another request holds is refused (409), and only
// then is a released or stale lock taken over.
//
// Left to a second reading: the single statement that inserts a new key
// or reads back a finished one (fastpath.go); the keys the reaper deleted
// and the 410 that refuses their late retries (tombstone.go); the steps
// each statement appends to the key for the console (steps.go).

package idem

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/rocketrides/rocketrides/internal/platform/metrics"
)

// Claim is the first atomic phase of an idempotent request. It returns the
// key locked for this request, or, if the key is already finished, the
// key unlocked with its stored response (the caller replays it; replayed
// is true). The checks run in the order a client needs them: a different
// request under the same key is refused first (ErrKeyReused), then a
// finished key replays, then a live lock refuses (ErrInFlight), and only
// then is a stale or released lock taken over. A key the reaper has
// deleted, and still keeps a record of, is refused: an *ExpiredError for
// the request it was used for, ErrKeyReused for another.
func (s *Store) Claim(ctx context.Context, req Request) (key *Key, replayed bool, err error) {
	// The two common cases take one statement (fastpath.go): a key never
	// seen before is inserted at started, already locked for this request
	// (the unique index on user and key lets exactly one of several
	// concurrent requests insert it), and a finished key is read back and
	// replayed.
	key, replayed, err = s.claimFast(ctx, req)
	if key != nil || err != nil {
		return key, replayed, err
	}
	// Everything else is decided under the key's row lock.
	return s.claimExisting(ctx, req)
}

// claimExisting arbitrates a key that already exists.
func (s *Store) claimExisting(ctx context.Context, req Request) (*Key, bool, error) {
	var (
		key      *Key
		replayed bool
		outcome  metrics.Outcome
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// FOR UPDATE serialises concurrent claims of the same key: the
		// decision below is made while no one else can change the row.
		l, err := s.lockKey(ctx, tx, lockKeySQL, req.UserID, req.Key, req.Method, req.Path, req.Params)
		switch {
		case errors.Is(err, errNoKey):
			// No key: the reaper deleted it, before the claim's insert or
			// (vanishingly rarely) since (tombstone.go).
			var expired error
			outcome, expired = s.reaped(ctx, tx, req)
			return expired
		case err != nil:
			return err
		}
		annotate(ctx, &l.Key)
		switch {
		case !l.Matches:
			outcome = metrics.OutcomeReuseMismatch
			return fmt.Errorf("key %d: %w", l.ID, ErrKeyReused)
		case l.RecoveryPoint == Finished:
			key, replayed, outcome = &l.Key, true, metrics.OutcomeReplay
			return nil
		case l.LockFresh:
			outcome = metrics.OutcomeInFlightConflict
			return fmt.Errorf("key %d: %w", l.ID, ErrInFlight)
		}
		key, outcome, err = s.take(ctx, tx, &l.Key)
		return err
	})
	if err == nil || errors.Is(err, ErrKeyReused) || errors.Is(err, ErrInFlight) || errors.Is(err, ErrKeyExpired) {
		s.metrics.Outcome(outcome)
	}
	if err != nil {
		return nil, false, err
	}
	return key, replayed, nil
}

// lockKeySQL reads a request's key ($2, the user; $3, the client's key)
// FOR UPDATE, with whether it was first used for this same request ($4 to
// $6: method, path, parameters) and whether its lock is still live ($1,
// the lock timeout).
const lockKeySQL = `
	SELECT id, created_at, idempotency_key, last_run_at, locked_at, lock_token,
	       request_method, request_params, request_path, origin_ip,
	       response_code, response_body, recovery_point, user_id,
	       first_foreign_attempt_at, unknown_outcomes, attention_reason, claims, identity,
	       request_method = $4 AND request_path = $5 AND request_params = $6::jsonb AS matches,
	       coalesce(locked_at > now() - $1::interval, false) AS lock_fresh
	FROM idempotency_keys
	WHERE user_id = $2 AND idempotency_key = $3
	FOR UPDATE`

// lockedKey is a key read FOR UPDATE by lockKey: the row, whether it was
// claimed for the request at hand, and whether its lock is still live.
type lockedKey struct {
	Key
	Matches   bool `db:"matches"`
	LockFresh bool `db:"lock_fresh"`
}

// errNoKey is lockKey's finding that no key matches.
var errNoKey = errors.New("no such idempotency key")

// lockKey reads, in tx, the key that sql (lockKeySQL, or the console's
// lockKeyByIDSQL) locks FOR UPDATE; args are the statement's from $2 on
// ($1 is the lock timeout). What the caller decides from the row no one
// else can change until tx ends.
func (s *Store) lockKey(ctx context.Context, tx pgx.Tx, sql string, args ...any) (*lockedKey, error) {
	rows, err := tx.Query(ctx, sql, append([]any{s.lockTimeout}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("lock idempotency key: %w", err)
	}
	locked, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByName[lockedKey])
	switch {
	case err != nil:
		return nil, fmt.Errorf("lock idempotency key: %w", err)
	case len(locked) == 0:
		return nil, errNoKey
	}
	return locked[0], nil
}

// takeSQL locks a key ($1) for a new claim with a fresh lock token ($2),
// counts the claim, and appends its step ($3, the event; $4, the actor;
// see steps.go), all in one statement.
const takeSQL = `
	UPDATE idempotency_keys
	SET locked_at = now(), last_run_at = now(), lock_token = $2, claims = claims + 1,
	    steps = (CASE WHEN jsonb_array_length(steps) < 100 THEN steps
	             ELSE jsonb_build_array(steps -> 0) || jsonb_path_query_array(steps, '$[last - 97 to last]') END)
	         || jsonb_build_object('at', clock_timestamp(), 'event', $3::text,
	                               'recovery_point', recovery_point::text, 'actor', $4::text, 'attempt', claims + 1)
	WHERE id = $1
	RETURNING id, created_at, idempotency_key, last_run_at, locked_at, lock_token,
	          request_method, request_params, request_path, origin_ip,
	          response_code, response_body, recovery_point, user_id,
	          first_foreign_attempt_at, unknown_outcomes, attention_reason, claims, identity`

// take claims k, locked by lockKey and found free to take (released, or
// its lock stale), for a new attempt: a fresh lock token, one more claim,
// and the step that says which. A lock still on k is stale (the caller
// has checked), and taking it fences its holder off. It returns the key
// as taken and the claim's outcome.
func (s *Store) take(ctx context.Context, tx pgx.Tx, k *Key) (*Key, metrics.Outcome, error) {
	event, outcome := StepResumed, metrics.OutcomeResumed
	if k.LockedAt != nil {
		event, outcome = StepTookOver, metrics.OutcomeLockTakeover
	}
	rows, err := tx.Query(ctx, takeSQL, k.ID, newLockToken(), event, s.actor)
	if err != nil {
		return nil, outcome, fmt.Errorf("take idempotency key %d: %w", k.ID, err)
	}
	key, err := collectKey(rows)
	if err != nil {
		return nil, outcome, fmt.Errorf("take idempotency key %d: %w", k.ID, err)
	}
	return key, outcome, nil
}
