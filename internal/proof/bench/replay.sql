-- A replay of a finished key as the api serves it (internal/idem Claim):
-- one statement that would insert a new key and instead reads back the
-- finished one. Finished is final, so no lock is needed to trust it; no
-- transaction id, nothing to flush. Run after ride.sql has finished keys;
-- -D minid=, maxid= bound the keys' ids.

\set id random(:minid, :maxid)
SELECT idempotency_key AS key FROM idempotency_keys WHERE id >= :id ORDER BY id LIMIT 1 \gset
SELECT id, email, stripe_customer_id FROM users WHERE api_token_hash = decode(:token_hex, 'hex');
WITH inserted AS (
	INSERT INTO idempotency_keys
		(user_id, idempotency_key, request_method, request_path, request_params,
		 origin_ip, recovery_point, locked_at, lock_token)
	VALUES (:uid, :key, 'POST', '/rides', :params, '127.0.0.1', 'started', now(), gen_random_uuid())
	ON CONFLICT (user_id, idempotency_key) DO NOTHING
	RETURNING id, created_at, idempotency_key, last_run_at, locked_at, lock_token,
		request_method, request_params, request_path, origin_ip,
		response_code, response_body, recovery_point, user_id,
		first_foreign_attempt_at, unknown_outcomes, attention_reason
)
SELECT id, created_at, idempotency_key, last_run_at, locked_at, lock_token,
	request_method, request_params, request_path, origin_ip,
	response_code, response_body, recovery_point, user_id,
	first_foreign_attempt_at, unknown_outcomes, attention_reason, true AS inserted FROM inserted
UNION ALL
SELECT id, created_at, idempotency_key, last_run_at, locked_at, lock_token,
	request_method, request_params, request_path, origin_ip,
	response_code, response_body, recovery_point, user_id,
	first_foreign_attempt_at, unknown_outcomes, attention_reason, false FROM idempotency_keys
WHERE user_id = :uid AND idempotency_key = :key
  AND recovery_point = 'finished'
  AND request_method = 'POST' AND request_path = '/rides' AND request_params = :params::jsonb;
