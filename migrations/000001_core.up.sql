-- Users of Rocket Rides. A user's API token is never stored, only its
-- SHA-256, so a leaked table does not leak credentials.
CREATE TABLE users (
    id                 BIGSERIAL PRIMARY KEY,
    email              TEXT      NOT NULL UNIQUE
        CHECK (char_length(email) <= 255),

    -- Stripe customer with a card attached; every ride charges it.
    stripe_customer_id TEXT      NOT NULL UNIQUE
        CHECK (char_length(stripe_customer_id) <= 50),

    api_token_hash     BYTEA     NOT NULL UNIQUE
        CHECK (octet_length(api_token_hash) = 32)
);

-- One row per idempotent request a client has made. It remembers what was
-- asked (method, path, params) so that a reused key with a different
-- request is refused, how far the request got (recovery_point) so that a
-- retry resumes instead of starting over, and, once finished, the response
-- so that a retry replays it.
CREATE TABLE idempotency_keys (
    id              BIGSERIAL   PRIMARY KEY,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    idempotency_key TEXT        NOT NULL
        CHECK (char_length(idempotency_key) BETWEEN 1 AND 255),
    last_run_at     TIMESTAMPTZ NOT NULL DEFAULT now(),

    -- Set while a request works the key. A lock older than the lock
    -- timeout is considered abandoned and may be taken over.
    locked_at       TIMESTAMPTZ DEFAULT now(),

    -- Fencing token: every claim takes a new one and every atomic phase
    -- commits only if the key still carries it, so a request whose lock
    -- was taken over can no longer move the key.
    lock_token      UUID,

    -- The request, as received.
    request_method  TEXT        NOT NULL
        CHECK (char_length(request_method) <= 10),
    request_params  JSONB       NOT NULL,
    request_path    TEXT        NOT NULL
        CHECK (char_length(request_path) <= 100),

    -- Where the request came from, kept so that the completer can write
    -- an honest audit record when it finishes the request on the client's
    -- behalf.
    origin_ip       INET        NOT NULL,

    -- The stored response, set together with recovery point 'finished'.
    response_code   INT         NULL,
    response_body   JSONB       NULL,

    recovery_point  TEXT        NOT NULL
        CHECK (recovery_point IN ('started', 'ride_created', 'charge_created', 'finished')),

    user_id         BIGINT      NOT NULL
        REFERENCES users ON DELETE RESTRICT,

    CONSTRAINT idempotency_keys_finished_has_response
        CHECK ((recovery_point = 'finished') = (response_code IS NOT NULL AND response_body IS NOT NULL)),
    CONSTRAINT idempotency_keys_lock_has_token
        CHECK ((locked_at IS NULL) = (lock_token IS NULL))
);

-- Keys are scoped per user: two users may pick the same key value.
CREATE UNIQUE INDEX idempotency_keys_user_id_idempotency_key
    ON idempotency_keys (user_id, idempotency_key);

-- The completer looks for unfinished keys that have not run recently.
CREATE INDEX idempotency_keys_unfinished_last_run_at
    ON idempotency_keys (last_run_at)
    WHERE recovery_point <> 'finished';

-- The reaper removes keys by age.
CREATE INDEX idempotency_keys_created_at
    ON idempotency_keys (created_at);

-- Who did what, from where; written in the same transaction as the change
-- it describes.
CREATE TABLE audit_records (
    id            BIGSERIAL   PRIMARY KEY,
    action        TEXT        NOT NULL
        CHECK (char_length(action) <= 50),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    data          JSONB       NOT NULL,
    origin_ip     INET        NOT NULL,
    resource_id   BIGINT      NOT NULL,
    resource_type TEXT        NOT NULL
        CHECK (char_length(resource_type) <= 50),
    user_id       BIGINT      NOT NULL
        REFERENCES users ON DELETE RESTRICT
);

CREATE INDEX audit_records_resource
    ON audit_records (resource_type, resource_id);

-- A ride, and the Stripe charge that paid for it once there is one.
CREATE TABLE rides (
    id                 BIGSERIAL       PRIMARY KEY,
    created_at         TIMESTAMPTZ     NOT NULL DEFAULT now(),

    -- Lets a retried request find the ride it already created. Keys are
    -- reaped after a few days; the ride stays and loses the reference.
    idempotency_key_id BIGINT
        REFERENCES idempotency_keys ON DELETE SET NULL,

    origin_lat         NUMERIC(13, 10) NOT NULL CHECK (origin_lat BETWEEN -90 AND 90),
    origin_lon         NUMERIC(13, 10) NOT NULL CHECK (origin_lon BETWEEN -180 AND 180),
    target_lat         NUMERIC(13, 10) NOT NULL CHECK (target_lat BETWEEN -90 AND 90),
    target_lon         NUMERIC(13, 10) NOT NULL CHECK (target_lon BETWEEN -180 AND 180),

    -- Price in the currency's smallest unit.
    amount             BIGINT          NOT NULL CHECK (amount > 0),
    currency           TEXT            NOT NULL CHECK (currency ~ '^[a-z]{3}$'),

    -- Stripe charge such as ch_123; NULL until the charge succeeded.
    stripe_charge_id   TEXT            UNIQUE
        CHECK (char_length(stripe_charge_id) <= 255),

    user_id            BIGINT          NOT NULL
        REFERENCES users ON DELETE RESTRICT,

    CONSTRAINT rides_user_id_idempotency_key_id_key UNIQUE (user_id, idempotency_key_id)
);

CREATE INDEX rides_idempotency_key_id
    ON rides (idempotency_key_id)
    WHERE idempotency_key_id IS NOT NULL;

-- GET /rides lists a user's rides newest first.
CREATE INDEX rides_user_id_id
    ON rides (user_id, id DESC);

-- Jobs staged inside a transaction; the enqueuer moves them into the job
-- queue only once that transaction has committed.
CREATE TABLE staged_jobs (
    id         BIGSERIAL   PRIMARY KEY,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    job_name   TEXT        NOT NULL
        CHECK (char_length(job_name) BETWEEN 1 AND 100),
    job_args   JSONB       NOT NULL
);
