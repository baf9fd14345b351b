-- The whole Rocket Rides schema. River's tables (river_job and friends) are
-- not here: cmd/migrate applies River's own migrations after this one.
--
-- Every constraint is a last line of defence: the code already refuses
-- what they refuse, and they make sure nothing that slips past it is ever
-- stored.


-- Users of Rocket Rides. Owned by package user.
CREATE TABLE users (
    id                 BIGSERIAL PRIMARY KEY,

    email              TEXT      NOT NULL UNIQUE
        CHECK (char_length(email) <= 255),

    -- Stripe customer with a card attached; every ride charges it.
    stripe_customer_id TEXT      NOT NULL UNIQUE
        CHECK (char_length(stripe_customer_id) <= 50),

    -- A user's API token is never stored, only its SHA-256, so a leaked
    -- table does not leak credentials. UNIQUE is also the index that
    -- authenticates a request by its token.
    api_token_hash     BYTEA     NOT NULL UNIQUE
        CHECK (octet_length(api_token_hash) = 32)
);


-- One row per idempotent request a client has made. Owned by package idem.
-- It remembers what was asked (method, path, params) so that a reused key
-- with a different request is refused, how far the request got
-- (recovery_point) so that a retry resumes instead of starting over, and,
-- once finished, the response so that a retry replays it.
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

    -- The last atomic phase the request completed: 'started' when
    -- claimed, 'finished' once the response is stored, and in between
    -- whatever points the endpoint declares (package rides has
    -- 'ride_created' and 'charge_created'). The table is shared by every
    -- endpoint, so it asks only for the shape of a name; a new endpoint
    -- needs no migration.
    recovery_point  TEXT        NOT NULL
        CHECK (recovery_point ~ '^[a-z][a-z0-9_]{0,49}$'),

    user_id         BIGINT      NOT NULL
        REFERENCES users ON DELETE RESTRICT,

    -- What the key remembers about its foreign state mutation (the Stripe
    -- charge), so that a retry can tell since when it has been tried and
    -- how often it ended with an outcome nobody can know:
    --
    --   * Stripe forgets an idempotency key after 24 hours. A retry after
    --     that would charge again, so past that window the charge is first
    --     looked up at Stripe and adopted if it exists.
    --   * An outcome that stays unknown however often it is retried
    --     (Stripe keeps replaying a stored 500) must not be retried
    --     forever: after a bounded number of attempts the key is set aside
    --     for a human, with the reason, and the completer leaves it alone.
    unknown_outcomes         INT         NOT NULL DEFAULT 0
        CHECK (unknown_outcomes >= 0),
    first_foreign_attempt_at TIMESTAMPTZ NULL,
    attention_reason         TEXT        NULL
        CHECK (char_length(attention_reason) <= 500),

    -- A key is finished exactly when its response is stored, so a replay
    -- always has a response to replay.
    CONSTRAINT idempotency_keys_finished_has_response
        CHECK ((recovery_point = 'finished') = (response_code IS NOT NULL AND response_body IS NOT NULL)),

    -- The two columns of the response go together. With the check above
    -- this makes "response_code IS NULL" mean "unfinished", which is what
    -- the completer's index is keyed on (below).
    CONSTRAINT idempotency_keys_response_complete
        CHECK ((response_code IS NULL) = (response_body IS NULL)),

    -- A lock without a token could not be fenced; a token without a lock
    -- would fence a request nobody is running.
    CONSTRAINT idempotency_keys_lock_has_token
        CHECK ((locked_at IS NULL) = (lock_token IS NULL))
)
-- Free space on each page lets the phases that do not finish a key update
-- it in place (HOT): they change no indexed column, so the row can stay on
-- its page without a new entry in every index.
WITH (fillfactor = 80);

-- Keys are scoped per user: two users may pick the same key value. This is
-- the index a claim arbitrates on (INSERT ... ON CONFLICT).
CREATE UNIQUE INDEX idempotency_keys_user_id_idempotency_key
    ON idempotency_keys (user_id, idempotency_key);

-- The completer looks for unfinished keys that have not run recently.
-- Keyed on response_code IS NULL rather than recovery_point <> 'finished'
-- (the same keys, by the checks above), because every phase changes
-- recovery_point, which would make no update of a key HOT, and because the
-- planner could prove that a phase's "recovery_point = 'started'" implies
-- that predicate and scan this whole index instead of using the primary
-- key. response_code is changed only by the finishing phase, and no
-- phase's WHERE clause implies it is NULL (see docs/scaling.md).
CREATE INDEX idempotency_keys_unfinished_last_run_at
    ON idempotency_keys (last_run_at)
    WHERE response_code IS NULL;

-- The reaper removes keys by age.
CREATE INDEX idempotency_keys_created_at
    ON idempotency_keys (created_at);


-- Who did what, from where; written in the same transaction as the change
-- it describes. Owned by package audit.
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

-- The history of one resource, such as a ride.
CREATE INDEX audit_records_resource
    ON audit_records (resource_type, resource_id);


-- A ride, and the Stripe charge that paid for it once there is one. Owned
-- by package rides.
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

    -- Price in the currency's smallest unit, always positive; the currency
    -- as Stripe spells it, an ISO 4217 code in lower case. A receipt shows
    -- both as they are.
    amount             BIGINT          NOT NULL CHECK (amount > 0),
    currency           TEXT            NOT NULL CHECK (currency ~ '^[a-z]{3}$'),

    -- Stripe charge such as ch_123; NULL until the charge succeeded. One
    -- charge pays for one ride.
    stripe_charge_id   TEXT            UNIQUE
        CHECK (char_length(stripe_charge_id) <= 255),

    user_id            BIGINT          NOT NULL
        REFERENCES users ON DELETE RESTRICT,

    -- One ride per request: a request that resumes after a crash finds
    -- the ride it created instead of creating a second one.
    CONSTRAINT rides_user_id_idempotency_key_id_key UNIQUE (user_id, idempotency_key_id)
);

-- A phase finds its key's ride, and deleting a key sets the reference to
-- NULL, without scanning rides.
CREATE INDEX rides_idempotency_key_id
    ON rides (idempotency_key_id)
    WHERE idempotency_key_id IS NOT NULL;

-- GET /rides lists a user's rides newest first.
CREATE INDEX rides_user_id_id
    ON rides (user_id, id DESC);


-- Jobs staged inside an atomic phase's transaction; the enqueuer moves
-- them into River only once that transaction has committed, in the
-- transaction that deletes them. Owned by package staged.
CREATE TABLE staged_jobs (
    id         BIGSERIAL   PRIMARY KEY,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    job_name   TEXT        NOT NULL
        CHECK (char_length(job_name) BETWEEN 1 AND 100),
    job_args   JSONB       NOT NULL
);


-- One row per ride whose receipt was sent. Owned by package receipt.
-- Sending mail is a foreign state mutation that cannot be rolled back, so
-- the worker looks here before sending and records the send right after:
-- a retried job finds the row and does not mail the rider again.
CREATE TABLE ride_receipts (
    -- Rides are never deleted; RESTRICT keeps it that way for rides that
    -- have a receipt.
    ride_id    BIGINT      PRIMARY KEY
        REFERENCES rides ON DELETE RESTRICT,

    -- Derived from the ride (<ride-123.receipt@...>), so a duplicate that
    -- got out anyway carries the same Message-ID and can be recognised
    -- downstream.
    message_id TEXT        NOT NULL UNIQUE
        CHECK (char_length(message_id) BETWEEN 1 AND 255),

    recipient  TEXT        NOT NULL
        CHECK (char_length(recipient) BETWEEN 1 AND 255),

    sent_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);


-- Requests that never finished, kept for a human after the reaper removed
-- their idempotency keys: the article's "put them in a list somewhere so
-- that a human can find out what failed". Owned by package idem. The
-- reaper writes a row in the same statement that deletes the key, so a
-- request cannot vanish between the two. The request's ride, if it got
-- that far, stays in rides (its idempotency_key_id set to NULL).
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
