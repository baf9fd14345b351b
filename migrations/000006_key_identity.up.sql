-- A random identity for each idempotency key, which the Stripe
-- idempotency key carries (rides.StripeKey: rocket-rides-<id>-<identity>).
--
-- The id alone is not enough. It comes from a sequence, and a failover to
-- an asynchronous standby loses the primary's last commits, the
-- sequence's advance with them: the id of a request whose charge already
-- reached Stripe can be handed to a different request, and Stripe would
-- answer that request with the lost one's charge, or refuse it as a key
-- reused with other parameters. A random UUID is never handed out twice,
-- whatever the database forgets.
--
-- No default while the column is added: a volatile default would give
-- every existing row a UUID, and a request in flight during the upgrade,
-- whose charge Stripe may already hold under rocket-rides-<id>, would
-- retry it under a new key and be charged twice. Existing rows keep NULL,
-- and with it the old key; new rows get a UUID.
ALTER TABLE idempotency_keys ADD COLUMN identity UUID NULL;
ALTER TABLE idempotency_keys ALTER COLUMN identity SET DEFAULT gen_random_uuid();
