-- Where each ride stands, so that a client can tell a ride still on its
-- way to its charge from a charged, a declined or a failed one, and from
-- one set aside for a person. Set by package rides, in the same atomic
-- phase that settles the charge:
--
--   pending       created; its charge is not settled yet. A retry with
--                 the same Idempotency-Key, or the completer, settles it.
--   succeeded     charged (stripe_charge_id is set). Final.
--   declined      the card was declined (the stored 402). Final.
--   failed        the payment provider rejected the charge (the stored
--                 502). Final.
--   needs_review  the charge's outcome could not be settled automatically
--                 and a person is to look; it moves on once they have.
--
-- A constant default makes adding the column instant; the backfill below
-- then settles the rides that already exist.
ALTER TABLE rides
    ADD COLUMN status TEXT NOT NULL DEFAULT 'pending'
        CONSTRAINT rides_status_known
        CHECK (status IN ('pending', 'succeeded', 'declined', 'failed', 'needs_review'));

-- Charged rides.
UPDATE rides SET status = 'succeeded' WHERE stripe_charge_id IS NOT NULL;

-- Rides whose key stored a final refusal.
UPDATE rides
SET status = CASE k.response_code WHEN 402 THEN 'declined' ELSE 'failed' END
FROM idempotency_keys k
WHERE k.id = rides.idempotency_key_id
  AND rides.stripe_charge_id IS NULL
  AND k.response_code IN (402, 502);

-- Rides whose key was set aside for a person.
UPDATE rides
SET status = 'needs_review'
FROM idempotency_keys k
WHERE k.id = rides.idempotency_key_id
  AND rides.stripe_charge_id IS NULL
  AND k.response_code IS NULL
  AND k.attention_reason IS NOT NULL;

-- Uncharged rides whose key the reaper already removed: nothing will
-- settle them any more, and the database no longer says whether the card
-- was declined, the charge rejected, or the request abandoned (then it is
-- in abandoned_requests). Stripe knows; a person can look.
UPDATE rides
SET status = 'needs_review'
WHERE idempotency_key_id IS NULL
  AND stripe_charge_id IS NULL;

-- A ride is charged exactly when it succeeded: a charge recorded on a
-- ride that says otherwise, or a success without a charge, is refused.
ALTER TABLE rides
    ADD CONSTRAINT rides_succeeded_has_charge
        CHECK ((status = 'succeeded') = (stripe_charge_id IS NOT NULL));

-- No index on status: GET /rides?status= walks one user's rides newest
-- first (rides_user_id_id) and filters, a few hundred rows at most, and an
-- index would cost every ride an extra index update when it settles.

-- Stored responses replay byte for byte, so the ones stored before rides
-- had a status learn it here: a stored 201 is a charged ride, and a stored
-- refusal now names its ride, as the ones stored from now on do.
UPDATE idempotency_keys
SET response_body = response_body || '{"status": "succeeded"}'
WHERE request_path = '/rides' AND response_code = 201;

UPDATE idempotency_keys
SET response_body = idempotency_keys.response_body || jsonb_build_object('ride_id', rides.id)
FROM rides
WHERE rides.idempotency_key_id = idempotency_keys.id
  AND idempotency_keys.request_path = '/rides'
  AND idempotency_keys.response_code IN (402, 502);
