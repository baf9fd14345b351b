DROP FUNCTION idempotency_key_phase_check(BOOLEAN, TEXT);
DROP FUNCTION idempotency_key_fence(BIGINT, UUID, TEXT);
