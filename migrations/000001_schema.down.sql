-- Everything 000001_schema.up.sql created, tables that refer to others first.
DROP FUNCTION api_token_check(BOOLEAN);
DROP FUNCTION idempotency_key_phase_check(BOOLEAN, TEXT);
DROP FUNCTION idempotency_key_fence_refuse(BIGINT, TEXT, BOOLEAN);
DROP TABLE operator_login_failures;
DROP TABLE operator_sessions;
DROP TABLE operators;
DROP TABLE reconcile_runs;
DROP TABLE rate_limit_charges;
DROP TABLE rate_limit_windows;
DROP TABLE reaped_keys;
DROP TABLE abandoned_requests;
DROP TABLE ride_receipts;
DROP TABLE staged_jobs;
DROP TABLE rides;
DROP TABLE audit_records;
DROP TABLE idempotency_keys;
DROP TABLE users;
DROP DOMAIN stripe_id, currency, amount, longitude, latitude, ride_status, attention_reason,
    unknown_outcome_count, claim_count, key_steps, recovery_point, request_path, request_method,
    idempotency_key_value, traceparent;
