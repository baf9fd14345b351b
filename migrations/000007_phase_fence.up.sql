-- The fence of an atomic phase, owned by package idem. It locks the key's
-- row only if the key still carries the phase's lock token and is still
-- at the recovery point the phase started from; otherwise it raises, and
-- the raise aborts the transaction. Because the fence aborts rather than
-- answers, a phase can send BEGIN, the fence, its writes, the new recovery
-- point and COMMIT in one round trip: nothing after a failed fence can
-- commit, whatever the client sends.
--
--   RR001  the key's lock was taken over, released or the key deleted
--          (idem.ErrLockLost)
--   RR002  from started: the key has a record in reaped_keys, so it was
--          claimed in the instant its predecessor was reaped (the claim's
--          guard read reaped_keys before the reaper committed); the
--          phase retires it
CREATE FUNCTION idempotency_key_fence(key_id BIGINT, token UUID, point TEXT) RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
    unreaped BOOLEAN;
BEGIN
    SELECT NOT EXISTS (
               SELECT 1 FROM reaped_keys r
               WHERE point = 'started' AND r.user_id = k.user_id AND r.idempotency_key = k.idempotency_key)
    INTO unreaped
    FROM idempotency_keys k
    WHERE k.id = key_id AND k.lock_token = token AND k.recovery_point = point
    FOR UPDATE OF k;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'idempotency key % no longer carries this lock at %', key_id, point
            USING ERRCODE = 'RR001';
    END IF;
    IF NOT unreaped THEN
        RAISE EXCEPTION 'idempotency key % has a reaped predecessor', key_id
            USING ERRCODE = 'RR002';
    END IF;
END
$$;

-- A phase's own check of its writes (idem.Tx.QueueOne): raises, and so
-- aborts the phase's transaction, unless ok. Made by Postgres rather than
-- by the client on the statement's answer, because the answer arrives
-- with COMMIT's: a check made then would come too late to stop it.
--
--   RR003  the check failed; the message says what
CREATE FUNCTION idempotency_key_phase_check(ok BOOLEAN, message TEXT) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT ok THEN
        RAISE EXCEPTION '%', message USING ERRCODE = 'RR003';
    END IF;
END
$$;
