-- The story of every request: each step its idempotency key took, when,
-- by whom and on which attempt, so that a person can follow a request
-- through its recovery points (the console's story page) without reading
-- eight processes' logs. Owned by package idem, which appends each step in
-- the very statement that takes it: a claim, an atomic phase, a set-aside,
-- an unlock. A step costs its request no round trip, and no row or index
-- entry either: the steps live on the key's own row, which the statement
-- is updating anyway.


-- How often the key has been claimed: by its first request, each retry
-- that took it up again (released, or its lock stale), the completer and
-- a person settling it. A step names the attempt it belongs to.
ALTER TABLE idempotency_keys ADD COLUMN claims INT NOT NULL DEFAULT 1
    CONSTRAINT idempotency_keys_claims_positive CHECK (claims >= 1);


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
--   attempt         the key's claims when the step was taken (see above)
--   detail          (set_aside only) why
--
-- The steps go with their key when the reaper deletes it.
ALTER TABLE idempotency_keys ADD COLUMN steps JSONB NOT NULL DEFAULT '[]'
    CONSTRAINT idempotency_keys_steps_array CHECK (jsonb_typeof(steps) = 'array');
