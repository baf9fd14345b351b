-- Everything 000003_reaped_keys.up.sql added.
DROP TABLE reaped_keys;
ALTER TABLE idempotency_keys DROP COLUMN resource_id;
