// First reading: the completer's claim of keys their clients abandoned
// (claimAbandonedSQL), and the reaper's delete of old keys, which lists
// the unfinished ones in abandoned_requests for a person (reapSQL).
//
// Left to a second reading: what Reap returns of each key (ReapedKey), the
// record each leaves in reaped_keys and the 410 it answers (tombstone.go);
// the endpoint's writes in the delete's transaction (rides.SettleReaped);
// the steps (steps.go).

package idem

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// claimAbandonedSQL claims the keys the completer should push to the end:
// unfinished, old enough that their client has probably given up ($1),
// not worked for a while ($2), not set aside for a person, and not
// locked, or locked so long ago that its holder is presumed dead ($3).
//
// FOR UPDATE SKIP LOCKED lets several completers run side by side, each
// taking rows no other holds. A fresh lock_token fences off the request
// that held a stale lock, as a client's takeover in Claim does. The
// longest waiting come first, by the partial index of unfinished keys
// (response_code IS NULL). Each key records its step ($5, the actor).
const claimAbandonedSQL = `
	WITH candidate AS (
		SELECT id, locked_at IS NOT NULL AS stale
		FROM idempotency_keys
		WHERE response_code IS NULL -- unfinished, in the index's own words
		  AND created_at < now() - $1::interval
		  AND last_run_at < now() - $2::interval
		  AND (locked_at IS NULL OR locked_at < now() - $3::interval)
		  AND attention_reason IS NULL
		ORDER BY last_run_at
		LIMIT $4
		FOR UPDATE SKIP LOCKED
	)
	UPDATE idempotency_keys k
	SET locked_at = now(), last_run_at = now(), lock_token = gen_random_uuid(), claims = k.claims + 1,
	    steps = (CASE WHEN jsonb_array_length(steps) < 100 THEN steps
	             ELSE jsonb_build_array(steps -> 0) || jsonb_path_query_array(steps, '$[last - 97 to last]') END)
	         || jsonb_build_object('at', clock_timestamp(),
	                               'event', (CASE WHEN candidate.stale THEN 'took_over' ELSE 'resumed' END)::text,
	                               'recovery_point', k.recovery_point::text, 'actor', $5::text, 'attempt', k.claims + 1)
	FROM candidate
	WHERE k.id = candidate.id
	RETURNING k.id, k.created_at, k.idempotency_key, k.last_run_at, k.locked_at, k.lock_token,
	          k.request_method, k.request_params, k.request_path, k.origin_ip,
	          k.response_code, k.response_body, k.recovery_point, k.user_id,
	          k.first_foreign_attempt_at, k.unknown_outcomes, k.attention_reason, k.claims, k.identity`

// ClaimAbandoned locks, for the completer, up to limit keys whose requests
// look abandoned by their clients, each under a new lock token, for the
// endpoint to resume. Concurrent callers never receive the same key.
func (s *Store) ClaimAbandoned(ctx context.Context, minAge, retryInterval time.Duration, limit int) ([]*Key, error) {
	rows, err := s.pool.Query(ctx, claimAbandonedSQL, minAge, retryInterval, s.lockTimeout, limit, s.actor)
	if err != nil {
		return nil, fmt.Errorf("claim abandoned idempotency keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByName[Key])
	if err != nil {
		return nil, fmt.Errorf("claim abandoned idempotency keys: %w", err)
	}
	return keys, nil
}

// reapSQL deletes one batch of expired keys and, in the same statement,
// copies the unfinished ones to abandoned_requests and records every one
// in reaped_keys: no request disappears without a row for a person, no
// key without the record that refuses its late retries. A key under a
// live lock is left alone: its request may be in its Stripe call. Rides
// survive (rides.idempotency_key_id is ON DELETE SET NULL).
const reapSQL = `
	WITH reaped AS (
		DELETE FROM idempotency_keys
		WHERE id IN (
			SELECT id
			FROM idempotency_keys
			WHERE created_at < now() - $1::interval
			  AND (locked_at IS NULL OR locked_at < now() - $3::interval)
			ORDER BY id
			LIMIT $2
			FOR UPDATE SKIP LOCKED
		)
		RETURNING id, user_id, idempotency_key, request_method, request_path, request_params,
		          recovery_point, created_at, last_run_at, attention_reason, response_code, resource_id
	), abandoned AS (
		INSERT INTO abandoned_requests
			(idempotency_key_id, user_id, idempotency_key, request_method, request_path,
			 request_params, recovery_point, created_at, last_run_at, reason)
		SELECT id, user_id, idempotency_key, request_method, request_path,
		       request_params, recovery_point, created_at, last_run_at,
		       coalesce('set aside for attention: ' || attention_reason, $4)
		FROM reaped
		WHERE recovery_point <> 'finished'
		RETURNING idempotency_key_id, reason
	), recorded AS (
		INSERT INTO reaped_keys
			(user_id, idempotency_key, idempotency_key_id, request_method, request_path,
			 request_params_sha256, response_code, resource_id, created_at)
		SELECT user_id, idempotency_key, id, request_method, request_path,
		       sha256(convert_to(request_params::text, 'UTF8')), response_code, resource_id, created_at
		FROM reaped
		ON CONFLICT (user_id, idempotency_key) DO UPDATE
		SET idempotency_key_id    = EXCLUDED.idempotency_key_id,
		    request_method        = EXCLUDED.request_method,
		    request_path          = EXCLUDED.request_path,
		    request_params_sha256 = EXCLUDED.request_params_sha256,
		    response_code         = EXCLUDED.response_code,
		    resource_id           = EXCLUDED.resource_id,
		    created_at            = EXCLUDED.created_at,
		    reaped_at             = EXCLUDED.reaped_at
	)
	SELECT reaped.id, reaped.user_id, reaped.recovery_point, reaped.request_path, reaped.resource_id,
	       abandoned.reason
	FROM reaped
	LEFT JOIN abandoned ON abandoned.idempotency_key_id = reaped.id
	ORDER BY reaped.id`

// Reap deletes up to limit keys created more than maxAge ago, the
// reaper's one batch, in one transaction: reapSQL, then settle's writes.
// Fewer than limit back means no more are due, or the rest are locked.
func (s *Store) Reap(ctx context.Context, maxAge time.Duration, limit int, settle ReapFunc) ([]ReapedKey, error) {
	reason := fmt.Sprintf("not finished within %s", maxAge)
	var keys []ReapedKey
	err := pgx.BeginFunc(ctx, s.pool, func(ptx pgx.Tx) error {
		rows, err := ptx.Query(ctx, reapSQL, maxAge, limit, s.lockTimeout, reason)
		if err == nil {
			keys, err = pgx.CollectRows(rows, pgx.RowToStructByName[ReapedKey])
		}
		if err != nil || settle == nil {
			return err
		}
		tx := &Tx{tx: ptx}
		if err := settle(ctx, tx, keys); err != nil {
			return err
		}
		return tx.Flush(ctx)
	})
	if err != nil {
		return nil, fmt.Errorf("reap idempotency keys older than %s: %w", maxAge, err)
	}
	return keys, nil
}
