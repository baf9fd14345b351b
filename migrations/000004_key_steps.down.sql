ALTER TABLE idempotency_keys DROP COLUMN steps, DROP COLUMN claims;
