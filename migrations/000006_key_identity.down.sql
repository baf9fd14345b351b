-- Everything 000006_key_identity.up.sql added. Keys created since then
-- would charge under a different Stripe key after the downgrade: only
-- roll back with no request in flight.
ALTER TABLE idempotency_keys DROP COLUMN identity;
