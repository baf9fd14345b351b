// First reading: the claim, the first atomic phase of every idempotent
// request, as Postgres receives it. In one transaction, a new key is
// inserted, locked for its request; an existing one is locked FOR UPDATE
// and decided in the order a client needs: another request under the same
// key is refused (422), a finished key replays its stored response, a key
// another request holds is refused (409), and only then is a released or
// stale lock taken over.
//
// Left to a second reading: the fast path's claim in one statement
// (claimFast); reaped keys, which refuse late retries (reaped); a guard;
// the steps; metrics, logs, traces and helpers (Store.count, annotate,
// traceparent: trace.go; newLockToken, collectKey).

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
// is true). Otherwise it refuses the request: ErrKeyReused, ErrInFlight,
// or, for a key the reaper deleted, an *ExpiredError.
func (s *Store) Claim(ctx context.Context, req Request) (key *Key, replayed bool, err error) {
	if !s.plain {
		return s.claimFast(ctx, req)
	}
	var outcome metrics.Outcome
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if req.Guard != nil {
			if _, err := tx.Exec(ctx, req.Guard.SQL, req.Guard.Args...); err != nil {
				return err
			}
		}
		// The unique index lets exactly one of several concurrent requests
		// insert a new key; the others wait for it, and decide below.
		key, err = collectKey(tx.Query(ctx, insertKeySQL,
			req.UserID, req.Key, req.Method, req.Path, req.Params, req.OriginIP, newLockToken(), s.actor, traceparent(ctx)))
		switch {
		case err != nil:
			return fmt.Errorf("claim idempotency key: %w", err)
		case key != nil:
			outcome = metrics.OutcomeNew
			return nil
		}
		key, replayed, outcome, err = s.decide(ctx, tx, req)
		return err
	})
	s.count(outcome, err)
	if err != nil {
		return nil, false, err
	}
	annotate(ctx, key)
	return key, replayed, nil
}

// insertKeySQL inserts a new key ($1, the user; $2, the client's key) for
// the request ($3 to $6) at started, locked under a fresh lock token ($7),
// with its first step ($8, the actor) and its trace ($9); nothing where
// the key exists, or where the reaper deleted it and keeps its record.
const insertKeySQL = `
	INSERT INTO idempotency_keys
		(user_id, idempotency_key, request_method, request_path, request_params,
		 origin_ip, recovery_point, locked_at, lock_token, traceparent, steps)
	SELECT $1::bigint, $2::text, $3::text, $4::text, $5::jsonb, $6::inet, 'started', now(), $7::uuid, $9,
	       jsonb_build_array(jsonb_build_object('at', clock_timestamp(), 'event', 'claimed'::text,
	                                            'recovery_point', 'started'::text, 'actor', $8::text, 'attempt', 1))
	WHERE NOT EXISTS (SELECT 1 FROM reaped_keys WHERE user_id = $1::bigint AND idempotency_key = $2::text)
	ON CONFLICT (user_id, idempotency_key) DO NOTHING
	RETURNING id, created_at, idempotency_key, last_run_at, locked_at, lock_token,
	          request_method, request_params, request_path, origin_ip,
	          response_code, response_body, recovery_point, user_id,
	          first_foreign_attempt_at, unknown_outcomes, attention_reason, claims, identity`

// decide arbitrates, in tx, the claim of a key that already exists.
func (s *Store) decide(ctx context.Context, tx pgx.Tx, req Request) (*Key, bool, metrics.Outcome, error) {
	// FOR UPDATE: no one else can change the row while this decides.
	l, err := s.lockKey(ctx, tx, lockKeySQL, req.UserID, req.Key, req.Method, req.Path, req.Params)
	switch {
	case errors.Is(err, errNoKey):
		// No key: the reaper deleted it (tombstone.go).
		outcome, err := s.reaped(ctx, tx, req)
		return nil, false, outcome, err
	case err != nil:
		return nil, false, 0, err
	}
	annotate(ctx, &l.Key)
	switch {
	case !l.Matches:
		return nil, false, metrics.OutcomeReuseMismatch, fmt.Errorf("key %d: %w", l.ID, ErrKeyReused)
	case l.RecoveryPoint == Finished:
		return &l.Key, true, metrics.OutcomeReplay, nil
	case l.LockFresh:
		return nil, false, metrics.OutcomeInFlightConflict, fmt.Errorf("key %d: %w", l.ID, ErrInFlight)
	}
	key, outcome, err := s.take(ctx, tx, &l.Key)
	return key, false, outcome, err
}

// lockKeySQL locks a request's key ($2, $3) FOR UPDATE, with whether it
// was first used for this request ($4 to $6) and whether its lock is
// still live ($1, the lock timeout).
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

// lockedKey is a key read FOR UPDATE, with what lockKeySQL says of it.
type lockedKey struct {
	Key
	Matches   bool `db:"matches"`
	LockFresh bool `db:"lock_fresh"`
}

// errNoKey is lockKey's finding that no key matches.
var errNoKey = errors.New("no such idempotency key")

// lockKey reads, in tx, the key sql (lockKeySQL, or lockKeyByIDSQL) locks;
// args are the statement's from $2 on.
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
// counts the claim, and appends its step ($3, the event; $4, the actor).
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

// take claims k, found free (released, or stale: its holder is fenced off).
func (s *Store) take(ctx context.Context, tx pgx.Tx, k *Key) (*Key, metrics.Outcome, error) {
	event, outcome := StepResumed, metrics.OutcomeResumed
	if k.LockedAt != nil {
		event, outcome = StepTookOver, metrics.OutcomeLockTakeover
	}
	key, err := collectKey(tx.Query(ctx, takeSQL, k.ID, newLockToken(), event, s.actor))
	if err != nil {
		return nil, outcome, fmt.Errorf("take idempotency key %d: %w", k.ID, err)
	}
	return key, outcome, nil
}
