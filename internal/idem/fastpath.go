// Second reading: the claim's fast path, the default (Config.Plain
// false): the claim of claim.go, the same decisions, in one statement for
// the two common cases, a new key and a finished one. The tests run the
// claim on both paths and hold them equal.

package idem

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/rocketrides/rocketrides/internal/platform/metrics"
)

// The claim's fast path: one round trip for the two common cases. A key
// never seen before is inserted already locked; the unique index
// arbitrates between concurrent requests with the same new key, so
// exactly one insert wins. A key that already finished, for the same
// request, is read back in the same statement and replayed: finished is
// final, so no lock is needed to trust it. Anything else (a different
// request, a key in flight or abandoned, a key inserted concurrently that
// this statement's snapshot cannot see) falls through to the locking path
// (claimExisting), which decides as claim.go does.
//
// The insert is not even tried for a key the statement can see: a replay
// then costs an index probe, not an id drawn from the sequence and a row
// built only to be dropped on the conflict. Nor for a key the reaper
// deleted, which has no row left to conflict with: a key of which
// reaped_keys keeps a record is not inserted, and the claim falls through
// to the locking path, which finds the record. Both guards are index
// probes inside the same statement, so a new key still costs one round
// trip.
//
// $1 to $6 are the request (user, key, method, path, parameters, origin),
// $7 the new lock token, $8 the actor of the claim's first step and $9
// the claiming request's traceparent (trace.go).
const claimFastSQL = `
	WITH inserted AS (
		INSERT INTO idempotency_keys
			(user_id, idempotency_key, request_method, request_path, request_params,
			 origin_ip, recovery_point, locked_at, lock_token, traceparent, steps)
		SELECT $1::bigint, $2::text, $3::text, $4::text, $5::jsonb, $6::inet, 'started', now(), $7::uuid, $9,
		       jsonb_build_array(jsonb_build_object('at', clock_timestamp(), 'event', 'claimed'::text,
		                                            'recovery_point', 'started'::text, 'actor', $8::text, 'attempt', 1))
		WHERE NOT EXISTS (
			SELECT 1 FROM idempotency_keys WHERE user_id = $1::bigint AND idempotency_key = $2::text)
		  AND NOT EXISTS (
			SELECT 1 FROM reaped_keys WHERE user_id = $1::bigint AND idempotency_key = $2::text)
		ON CONFLICT (user_id, idempotency_key) DO NOTHING
		RETURNING id, created_at, idempotency_key, last_run_at, locked_at, lock_token,
		          request_method, request_params, request_path, origin_ip,
		          response_code, response_body, recovery_point, user_id,
		          first_foreign_attempt_at, unknown_outcomes, attention_reason, claims, identity
	)
	SELECT *, true AS inserted FROM inserted
	UNION ALL
	SELECT id, created_at, idempotency_key, last_run_at, locked_at, lock_token,
	       request_method, request_params, request_path, origin_ip,
	       response_code, response_body, recovery_point, user_id,
	       first_foreign_attempt_at, unknown_outcomes, attention_reason, claims, identity,
	       false
	FROM idempotency_keys
	WHERE user_id = $1 AND idempotency_key = $2
	  AND recovery_point = 'finished'
	  AND request_method = $3 AND request_path = $4 AND request_params = $5::jsonb`

// claimRow is a row of the fast claim: the key, and whether this request
// inserted it.
type claimRow struct {
	Key
	Inserted bool `db:"inserted"`
}

// claimFast is Claim on the fast path: claimFastSQL, with the request's
// guard, if any, sent ahead of it in the same round trip and a
// transaction of its own (a guard that fails leaves the claim unsent, and
// its error is returned); then, for a key it neither inserted nor
// replayed, the locking path.
func (s *Store) claimFast(ctx context.Context, req Request) (key *Key, replayed bool, err error) {
	args := []any{req.UserID, req.Key, req.Method, req.Path, req.Params, req.OriginIP, newLockToken(), s.actor, traceparent(ctx)}
	var claimed []*claimRow
	collect := func(rows pgx.Rows) error {
		claimed, err = pgx.CollectRows(rows, pgx.RowToAddrOfStructByName[claimRow])
		return err
	}
	if req.Guard == nil {
		rows, qerr := s.pool.Query(ctx, claimFastSQL, args...)
		if qerr == nil {
			qerr = collect(rows)
		}
		err = qerr
	} else {
		b := &pgx.Batch{}
		b.Queue(req.Guard.SQL, req.Guard.Args...)
		b.Queue(claimFastSQL, args...).Query(collect)
		err = s.pool.SendBatch(ctx, b).Close()
	}
	if err != nil {
		return nil, false, fmt.Errorf("claim idempotency key: %w", err)
	}
	if len(claimed) != 1 {
		// Everything else is decided under the key's row lock.
		return s.claimExisting(ctx, req)
	}
	key = &claimed[0].Key
	annotate(ctx, key)
	if claimed[0].Inserted {
		s.metrics.Outcome(metrics.OutcomeNew)
		return key, false, nil
	}
	s.metrics.Outcome(metrics.OutcomeReplay)
	return key, true, nil
}

// claimExisting arbitrates a key that already exists, in a transaction
// of its own, as the plain claim does in its (decide).
func (s *Store) claimExisting(ctx context.Context, req Request) (*Key, bool, error) {
	var (
		key      *Key
		replayed bool
		outcome  metrics.Outcome
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		key, replayed, outcome, err = s.decide(ctx, tx, req)
		return err
	})
	s.count(outcome, err)
	if err != nil {
		return nil, false, err
	}
	return key, replayed, nil
}
