// Second reading: the claim's fast path (claim.go reads it as one call).

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
// (claimExisting).
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
// $7 the new lock token and $8 the actor of the claim's first step.
const claimFastSQL = `
	WITH inserted AS (
		INSERT INTO idempotency_keys
			(user_id, idempotency_key, request_method, request_path, request_params,
			 origin_ip, recovery_point, locked_at, lock_token, steps)
		SELECT $1::bigint, $2::text, $3::text, $4::text, $5::jsonb, $6::inet, 'started', now(), $7::uuid,
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

// claimFast runs claimFastSQL. It returns the key inserted for req, or the
// finished key to replay (replayed is true); a nil key when neither, for
// the locking path to decide.
func (s *Store) claimFast(ctx context.Context, req Request) (key *Key, replayed bool, err error) {
	return s.claimFastGuarded(ctx, req, nil)
}

// claimFastGuarded is claimFast with guard, when not nil, sent ahead of
// the claim in the same round trip and the same transaction: a guard that
// fails leaves the claim unsent, and its error is returned.
func (s *Store) claimFastGuarded(ctx context.Context, req Request, guard *Guard) (key *Key, replayed bool, err error) {
	args := []any{req.UserID, req.Key, req.Method, req.Path, req.Params, req.OriginIP, newLockToken(), s.actor}
	var claimed []*claimRow
	collect := func(rows pgx.Rows) error {
		claimed, err = pgx.CollectRows(rows, pgx.RowToAddrOfStructByName[claimRow])
		return err
	}
	if guard == nil {
		rows, qerr := s.pool.Query(ctx, claimFastSQL, args...)
		if qerr == nil {
			qerr = collect(rows)
		}
		err = qerr
	} else {
		b := &pgx.Batch{}
		b.Queue(guard.SQL, guard.Args...)
		b.Queue(claimFastSQL, args...).Query(collect)
		err = s.pool.SendBatch(ctx, b).Close()
	}
	if err != nil {
		return nil, false, fmt.Errorf("claim idempotency key: %w", err)
	}
	if len(claimed) != 1 {
		return nil, false, nil
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
