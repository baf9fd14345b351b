-- Requests that never finished, kept for a human after the reaper removed
-- their idempotency keys: the article's "put them in a list somewhere so
-- that a human can find out what failed". The reaper writes a row in the
-- same statement that deletes the key, so a request cannot vanish between
-- the two. The request's ride, if it got that far, stays in rides (its
-- idempotency_key_id set to NULL).
CREATE TABLE abandoned_requests (
    -- The reaped key's id, which is also how Stripe knows the request: a
    -- charge carries metadata idempotency_key_id and the idempotency key
    -- rocket-rides-<id>. Key ids are never reused, so a key is listed at
    -- most once.
    idempotency_key_id BIGINT      PRIMARY KEY,

    user_id            BIGINT      NOT NULL
        REFERENCES users ON DELETE RESTRICT,

    -- The request, as the client sent it.
    idempotency_key    TEXT        NOT NULL
        CHECK (char_length(idempotency_key) BETWEEN 1 AND 255),
    request_method     TEXT        NOT NULL
        CHECK (char_length(request_method) <= 10),
    request_path       TEXT        NOT NULL
        CHECK (char_length(request_path) <= 100),
    request_params     JSONB       NOT NULL,

    -- The last atomic phase the request completed. Finished requests are
    -- simply deleted; only the others need a person.
    recovery_point     TEXT        NOT NULL
        CHECK (recovery_point <> 'finished'),

    -- The key's own timestamps: when the client first sent the request,
    -- and when anyone (client retry or completer) last worked it.
    created_at         TIMESTAMPTZ NOT NULL,
    last_run_at        TIMESTAMPTZ NOT NULL,

    reaped_at          TIMESTAMPTZ NOT NULL DEFAULT now(),

    -- Why the request is here, in words for the person reviewing it.
    reason             TEXT        NOT NULL
        CHECK (char_length(reason) BETWEEN 1 AND 1000)
);

-- Support looks a request up by the user and the Idempotency-Key the
-- client quotes. Not unique: once a key is reaped its value may be used
-- again.
CREATE INDEX abandoned_requests_user_id_idempotency_key
    ON abandoned_requests (user_id, idempotency_key);
