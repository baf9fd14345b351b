-- The story of every request: each step its idempotency key took, when,
-- by whom and on which attempt, so that a person can follow a request
-- through its recovery points (the console's story page) without reading
-- eight processes' logs. Owned by package idem, which writes each row in
-- the very statement that takes the step: a claim, an atomic phase, a
-- set-aside, an unlock. A step costs its request no round trip.


-- How often the key has been claimed: by its first request, each retry
-- that took it up again (released, or its lock stale), the completer and
-- a person settling it. A step names the attempt it belongs to.
ALTER TABLE idempotency_keys ADD COLUMN claims INT NOT NULL DEFAULT 1
    CONSTRAINT idempotency_keys_claims_positive CHECK (claims >= 1);


CREATE TABLE idempotency_key_steps (
    -- Steps go with their key: the reaper's delete removes them.
    idempotency_key_id BIGINT      NOT NULL
        REFERENCES idempotency_keys ON DELETE CASCADE,

    -- The wall clock, not the transaction's start, so that steps order
    -- by when they happened.
    at                 TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),

    --   claimed          a new key, claimed by its first request
    --   resumed          a released key claimed again
    --   took_over        a stale lock taken over: whoever held it is fenced off
    --   reached          an atomic phase committed and reached recovery_point
    --   unknown_outcome  the foreign call's outcome could not be known
    --   set_aside        set aside for a person (detail: why)
    --   unlocked         released after a failure, at recovery_point
    --   reopened         a person cleared the set-aside for another attempt
    event              TEXT        NOT NULL
        CONSTRAINT idempotency_key_steps_event_known
        CHECK (event IN ('claimed', 'resumed', 'took_over', 'reached', 'unknown_outcome',
                         'set_aside', 'unlocked', 'reopened')),

    -- The key's recovery point after the step.
    recovery_point     TEXT        NOT NULL
        CHECK (recovery_point ~ '^[a-z][a-z0-9_]{0,49}$'),

    -- The process that took it: api, completer, console.
    actor              TEXT        NOT NULL
        CHECK (actor ~ '^[a-z][a-z0-9_-]{0,29}$'),

    -- The key's claims when the step was taken (see above).
    attempt            INT         NOT NULL CHECK (attempt >= 1),

    detail             TEXT        NULL
        CHECK (char_length(detail) <= 1000)
);

-- A key's story, in order; also what the reaper's cascade deletes by. No
-- primary key: nothing refers to a step, and a unique index would be one
-- more index to update on every step of every request.
CREATE INDEX idempotency_key_steps_key_at
    ON idempotency_key_steps (idempotency_key_id, at);
