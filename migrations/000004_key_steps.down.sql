DROP TABLE idempotency_key_steps;
ALTER TABLE idempotency_keys DROP COLUMN claims;
