-- Idempotency keys are reaped after REAPER_MAX_AGE (72 hours). A retry
-- that comes later must not run its request again: under the key's old
-- row it would have been replayed, and as a new request it would make a
-- second ride and a second charge. So the reaper leaves a compact record
-- of every key it deletes, and a claim of a recorded key is refused,
-- until the record itself ages out (REAPED_KEY_RETENTION, 30 days after
-- the key was first used).


-- What a request created, named on its key by the atomic phase that
-- created it (package rides: the ride's id), so that the key's record can
-- still say where to look once the key is gone (rides.idempotency_key_id
-- is set to NULL when the key is deleted). NULL until then.
ALTER TABLE idempotency_keys ADD COLUMN resource_id BIGINT NULL;

UPDATE idempotency_keys
SET resource_id = rides.id
FROM rides
WHERE rides.idempotency_key_id = idempotency_keys.id;


-- The reaped keys. Owned by package idem; the reaper writes a row in the
-- same statement that deletes the key (as it does for abandoned_requests),
-- so a key cannot disappear without its record.
CREATE TABLE reaped_keys (
    -- The key as the client sent it, which is how a late retry finds it.
    user_id               BIGINT      NOT NULL
        REFERENCES users ON DELETE RESTRICT,
    idempotency_key       TEXT        NOT NULL
        CHECK (char_length(idempotency_key) BETWEEN 1 AND 255),

    -- The deleted row's id: how the logs, Stripe (metadata
    -- idempotency_key_id, key rocket-rides-<id>) and abandoned_requests
    -- know the request.
    idempotency_key_id    BIGINT      NOT NULL,

    -- The request's fingerprint: a retry of the same request is told the
    -- key expired; a different request under the key is a reused key.
    -- The parameters are kept as the SHA-256 of their JSONB text, which is
    -- all a comparison needs.
    request_method        TEXT        NOT NULL
        CHECK (char_length(request_method) <= 10),
    request_path          TEXT        NOT NULL
        CHECK (char_length(request_path) <= 100),
    request_params_sha256 BYTEA       NOT NULL
        CHECK (octet_length(request_params_sha256) = 32),

    -- The outcome: the stored response's status, NULL when the request
    -- never finished (it is then also in abandoned_requests), and what it
    -- created, if anything.
    response_code         INT         NULL,
    resource_id           BIGINT      NULL,

    -- When the client first used the key; the record is kept until
    -- REAPED_KEY_RETENTION after it.
    created_at            TIMESTAMPTZ NOT NULL,
    reaped_at             TIMESTAMPTZ NOT NULL DEFAULT now(),

    -- A key value is recorded once per user: while the record exists no
    -- new key of that value is claimed (one claimed in the very instant
    -- its predecessor was reaped is retired by its first phase's fence),
    -- and should one be reaped all the same, its record replaces this.
    PRIMARY KEY (user_id, idempotency_key)
);

-- The reaper forgets records by age.
CREATE INDEX reaped_keys_created_at
    ON reaped_keys (created_at);
