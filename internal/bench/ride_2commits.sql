-- ride.sql with its four commits folded into two, to measure what that
-- saves: the claim, the ride and its audit record commit together (a
-- failed phase then leaves no key behind, so a retry starts afresh), and
-- after the Stripe call the charge, the staged receipt and the stored 201
-- commit together (a crash in between repeats the Stripe call under the
-- same Stripe idempotency key, which returns the same charge). Same -D
-- variables as ride.sql.

\set n :n + 1

SELECT id, email, stripe_customer_id FROM users WHERE api_token_hash = decode(:token_hex, 'hex');

BEGIN;
WITH inserted AS (
	INSERT INTO idempotency_keys
		(user_id, idempotency_key, request_method, request_path, request_params,
		 origin_ip, recovery_point, locked_at, lock_token, first_foreign_attempt_at)
	VALUES (:uid, 'pgbench-' || :run::text || '-' || :client_id::text || '-' || :n::text,
		'POST', '/rides', :params, '127.0.0.1', 'ride_created', now(), gen_random_uuid(), now())
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
WHERE user_id = :uid AND idempotency_key = 'pgbench-' || :run::text || '-' || :client_id::text || '-' || :n::text
  AND recovery_point = 'finished'
  AND request_method = 'POST' AND request_path = '/rides' AND request_params = :params::jsonb \gset k_
INSERT INTO rides (idempotency_key_id, origin_lat, origin_lon, target_lat, target_lon,
	amount, currency, user_id)
VALUES (:k_id, 37.7749, -122.4194, 37.8044, -122.2712, 2000, 'usd', :uid)
RETURNING id, created_at, origin_lat::float8, origin_lon::float8, target_lat::float8,
	target_lon::float8, amount, currency, stripe_charge_id, user_id, idempotency_key_id \gset ride_
INSERT INTO audit_records (action, data, origin_ip, resource_id, resource_type, user_id)
VALUES ('ride.created', :params, '127.0.0.1', :ride_id, 'ride', :uid);
END;

BEGIN;
UPDATE rides SET stripe_charge_id = 'ch_pgbench_' || :k_id::text
WHERE id = :ride_id AND (stripe_charge_id IS NULL OR stripe_charge_id = 'ch_pgbench_' || :k_id::text);
WITH staged AS (
	INSERT INTO staged_jobs (job_name, job_args) VALUES ('send_ride_receipt', :job_args) RETURNING id
)
SELECT pg_notify('staged_jobs', '') FROM staged;
UPDATE idempotency_keys
SET recovery_point = 'finished',
    response_code  = 201,
    response_body  = :body,
    locked_at      = NULL,
    lock_token     = NULL
WHERE id = :k_id AND lock_token = :k_lock_token AND recovery_point = 'ride_created'
RETURNING response_body, first_foreign_attempt_at;
END;
