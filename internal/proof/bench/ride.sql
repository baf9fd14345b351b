-- The database work of one ride, statement for statement and round trip
-- for round trip as the api issues it, with nothing else: no HTTP, no
-- Stripe call, no Go. Run with pgbench -M prepared (pgx caches prepared
-- statements the same way) and -D uid=<user id> -D run=<run id> -D n=0
-- -D token_hex=<sha256 of the API token, hex> -D params=<canonical
-- request params> -D job_args=<receipt job args> -D body=<stored 201 body>.
--
-- 8 round trips, 4 commits: the claim, then three atomic phases, each its
-- own transaction sent as two pipelines (internal/api authenticate;
-- internal/idem Claim and Phase; internal/rides createRide, recordCharge,
-- stageReceipt; internal/audit Insert; internal/jobs Stage). The first
-- pipeline of a phase carries BEGIN, the fence and the phase's first
-- writes; the second the rest, the new recovery point and COMMIT, which
-- is sent only once the fence has answered. TestRideScript runs it
-- against the schema.
--
-- pgbench cannot \gset inside a pipeline, so where the api sends back the
-- ride id that the INSERT returned, this script reads the same value from
-- the session's rides_id_seq.

-- A per-client counter: with :run and :client_id it makes every key new.
\set n :n + 1

-- authenticate: the bearer token's user.
SELECT id, email, stripe_customer_id FROM users WHERE api_token_hash = decode(:token_hex, 'hex');

-- Claim: one statement that inserts a new key, already locked, or reads
-- back a finished key of the same request to replay it. Here the key is new.
WITH inserted AS (
	INSERT INTO idempotency_keys
		(user_id, idempotency_key, request_method, request_path, request_params,
		 origin_ip, recovery_point, locked_at, lock_token)
	SELECT :uid, 'pgbench-' || :run::text || '-' || :client_id::text || '-' || :n::text,
		'POST', '/rides', :params::jsonb, '127.0.0.1'::inet, 'started', now(), gen_random_uuid()
	WHERE NOT EXISTS (
		SELECT 1 FROM reaped_keys
		WHERE user_id = :uid AND idempotency_key = 'pgbench-' || :run::text || '-' || :client_id::text || '-' || :n::text)
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

-- Atomic phase started -> ride_created: the fence, the ride; then its
-- audit record and the compare-and-set on the key, which also notes the
-- first charge attempt about to be made.
\startpipeline
BEGIN;
SELECT NOT EXISTS (
	SELECT 1 FROM reaped_keys r
	WHERE 'started' = 'started' AND r.user_id = k.user_id AND r.idempotency_key = k.idempotency_key)
FROM idempotency_keys k
WHERE id = :k_id AND lock_token = :k_lock_token AND recovery_point = 'started'
FOR UPDATE OF k;
INSERT INTO rides (idempotency_key_id, origin_lat, origin_lon, target_lat, target_lon,
	amount, currency, user_id, status)
VALUES (:k_id, 37.7749, -122.4194, 37.8044, -122.2712, 2000, 'usd', :uid, 'pending')
RETURNING id, created_at, status, origin_lat::float8, origin_lon::float8, target_lat::float8,
	target_lon::float8, amount, currency, stripe_charge_id, user_id, idempotency_key_id;
\endpipeline
\startpipeline
INSERT INTO audit_records (action, data, origin_ip, resource_id, resource_type, user_id)
VALUES ('ride.created', :params, '127.0.0.1', (SELECT currval('rides_id_seq')), 'ride', :uid);
UPDATE idempotency_keys
SET recovery_point = 'ride_created',
    response_code  = NULL,
    response_body  = NULL,
    locked_at      = CASE WHEN 'ride_created' = 'finished' THEN NULL ELSE now() END,
    lock_token     = CASE WHEN 'ride_created' = 'finished' THEN NULL ELSE lock_token END,
    first_foreign_attempt_at = CASE WHEN true THEN coalesce(first_foreign_attempt_at, now())
                                    ELSE first_foreign_attempt_at END,
    resource_id    = coalesce((SELECT currval('rides_id_seq')), resource_id)
WHERE id = :k_id AND lock_token = :k_lock_token AND recovery_point = 'started'
RETURNING response_body, first_foreign_attempt_at;
COMMIT;
\endpipeline

-- (The Stripe charge happens here, outside any transaction.)

-- Atomic phase ride_created -> charge_created: the fence and the charge on
-- the ride; then the key.
\startpipeline
BEGIN;
SELECT NOT EXISTS (
	SELECT 1 FROM reaped_keys r
	WHERE 'ride_created' = 'started' AND r.user_id = k.user_id AND r.idempotency_key = k.idempotency_key)
FROM idempotency_keys k
WHERE id = :k_id AND lock_token = :k_lock_token AND recovery_point = 'ride_created'
FOR UPDATE OF k;
UPDATE rides SET stripe_charge_id = 'ch_pgbench_' || :k_id::text, status = 'succeeded'
WHERE id = (SELECT currval('rides_id_seq'))
  AND status IN ('pending', 'needs_review', 'succeeded')
  AND (stripe_charge_id IS NULL OR stripe_charge_id = 'ch_pgbench_' || :k_id::text);
\endpipeline
\startpipeline
UPDATE idempotency_keys
SET recovery_point = 'charge_created',
    response_code  = NULL,
    response_body  = NULL,
    locked_at      = CASE WHEN 'charge_created' = 'finished' THEN NULL ELSE now() END,
    lock_token     = CASE WHEN 'charge_created' = 'finished' THEN NULL ELSE lock_token END,
    first_foreign_attempt_at = CASE WHEN false THEN coalesce(first_foreign_attempt_at, now())
                                    ELSE first_foreign_attempt_at END,
    resource_id    = coalesce(NULL::bigint, resource_id)
WHERE id = :k_id AND lock_token = :k_lock_token AND recovery_point = 'ride_created'
RETURNING response_body, first_foreign_attempt_at;
COMMIT;
\endpipeline

-- Atomic phase charge_created -> finished: the fence and the staged
-- receipt job with its NOTIFY in one statement; then the stored 201.
\startpipeline
BEGIN;
SELECT NOT EXISTS (
	SELECT 1 FROM reaped_keys r
	WHERE 'charge_created' = 'started' AND r.user_id = k.user_id AND r.idempotency_key = k.idempotency_key)
FROM idempotency_keys k
WHERE id = :k_id AND lock_token = :k_lock_token AND recovery_point = 'charge_created'
FOR UPDATE OF k;
WITH staged AS (
	INSERT INTO staged_jobs (job_name, job_args) VALUES ('send_ride_receipt', :job_args) RETURNING id
)
SELECT pg_notify('staged_jobs', '') FROM staged;
\endpipeline
\startpipeline
UPDATE idempotency_keys
SET recovery_point = 'finished',
    response_code  = 201,
    response_body  = :body,
    locked_at      = CASE WHEN 'finished' = 'finished' THEN NULL ELSE now() END,
    lock_token     = CASE WHEN 'finished' = 'finished' THEN NULL ELSE lock_token END,
    first_foreign_attempt_at = CASE WHEN false THEN coalesce(first_foreign_attempt_at, now())
                                    ELSE first_foreign_attempt_at END,
    resource_id    = coalesce(NULL::bigint, resource_id)
WHERE id = :k_id AND lock_token = :k_lock_token AND recovery_point = 'charge_created'
RETURNING response_body, first_foreign_attempt_at;
COMMIT;
\endpipeline
