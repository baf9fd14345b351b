-- The steps of a key move onto the key's own row (package idem). A step
-- was a row of idempotency_key_steps and an entry in its index, written
-- by the statement that took it; on the key's row, which that statement
-- is updating anyway, a step costs no row and no index entry.
--
-- The first release of 000004 already put the steps on the row. A
-- database it migrated has the column and no table, and this migration
-- leaves it as it is.
--
-- The key's steps, oldest first: an array of objects
--
--   at              when (the wall clock, not the transaction's start, so
--                   that steps order by when they happened)
--   event           what happened:
--                     claimed          a new key, claimed by its first request
--                     resumed          a released key claimed again
--                     took_over        a stale lock taken over: whoever held it is fenced off
--                     reached          an atomic phase committed and reached recovery_point
--                     unknown_outcome  the foreign call's outcome could not be known
--                     set_aside        set aside for a person (detail: why)
--                     unlocked         released after a failure, at recovery_point
--                     reopened         a person cleared the set-aside for another attempt
--   recovery_point  the key's recovery point after the step
--   actor           the process that took it: api, completer, console
--   attempt         the key's claims when the step was taken (000004)
--   detail          (set_aside only) why
--
-- The steps go with their key when the reaper deletes it.
DO $$
BEGIN
    IF to_regclass('idempotency_key_steps') IS NULL THEN
        RETURN; -- migrated by the first release of 000004: already on the row
    END IF;

    ALTER TABLE idempotency_keys ADD COLUMN steps JSONB NOT NULL DEFAULT '[]'
        CONSTRAINT idempotency_keys_steps_array CHECK (jsonb_typeof(steps) = 'array');

    -- The steps recorded so far, in the order they were taken.
    UPDATE idempotency_keys k
    SET steps = s.steps
    FROM (
        SELECT idempotency_key_id,
               jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
                   'at', at, 'event', event, 'recovery_point', recovery_point,
                   'actor', actor, 'attempt', attempt, 'detail', detail)) ORDER BY at) AS steps
        FROM idempotency_key_steps
        GROUP BY idempotency_key_id
    ) s
    WHERE k.id = s.idempotency_key_id;

    DROP TABLE idempotency_key_steps;
END
$$;
