-- A replay of a finished key through the locking path (internal/idem
-- claimExisting, which served every replay before commit 0b7a95e and now
-- serves only in-flight, abandoned and mismatched keys): the claim INSERT
-- finds the key, and a transaction reads it FOR UPDATE. Locking the row
-- gives the transaction a transaction id, so its commit waits for a WAL
-- flush, and the first lock on a page after a checkpoint writes the whole
-- page to WAL. Run after ride.sql has finished keys; -D minid=, maxid=
-- bound the keys' ids.

\set id random(:minid, :maxid)
SELECT idempotency_key AS key FROM idempotency_keys WHERE id >= :id ORDER BY id LIMIT 1 \gset
SELECT id, email, stripe_customer_id FROM users WHERE api_token_hash = decode(:token_hex, 'hex');
INSERT INTO idempotency_keys
	(user_id, idempotency_key, request_method, request_path, request_params,
	 origin_ip, recovery_point, locked_at, lock_token)
VALUES (:uid, :key, 'POST', '/rides', :params, '127.0.0.1', 'started', now(), gen_random_uuid())
ON CONFLICT (user_id, idempotency_key) DO NOTHING
RETURNING id;
BEGIN;
SELECT id, created_at, idempotency_key, last_run_at, locked_at, lock_token,
	request_method, request_params, request_path, origin_ip,
	response_code, response_body, recovery_point, user_id,
	first_foreign_attempt_at, unknown_outcomes, attention_reason,
	request_method = 'POST' AND request_path = '/rides' AND request_params = :params::jsonb,
	coalesce(locked_at > now() - '90 seconds'::interval, false)
FROM idempotency_keys
WHERE user_id = :uid AND idempotency_key = :key
FOR UPDATE;
END;
