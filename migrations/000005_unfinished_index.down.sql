ALTER TABLE idempotency_keys RESET (fillfactor);

DROP INDEX idempotency_keys_unfinished_last_run_at;
CREATE INDEX idempotency_keys_unfinished_last_run_at
    ON idempotency_keys (last_run_at)
    WHERE recovery_point <> 'finished';

ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_response_complete;
