-- The Rocket Rides schema, whole, in the order the article meets its ideas:
-- the key's row (recovery point, lock, stored response), the phases' writes
-- (audit records, rides and their charges, staged jobs), the receipt job's
-- record, and what the reaper keeps for people. River's tables are not here:
-- cmd/migrate applies River's own. What follows the "Second reading" line is
-- machinery (the fence's plpgsql, the columns' domains, the steps, the page
-- room) and what is beyond the article (the reconciler's runs, the rate
-- limits, the console's accounts): a first reading stops there.
--
-- Policy: until the first tagged release the schema is edited in place, here;
-- nothing is deployed, so there is no history to keep (`make clean` resets a
-- dev database). migrations/testdata/schema.sql is the schema as pg_dump
-- prints it, and TestSchema fails until it is rewritten (-update).
--
-- Every constraint is a last line of defence: the code refuses the same
-- things first, and these make sure nothing that slips past is stored.

-- Riders; owned by package user. A token is stored only as its SHA-256,
-- so a leaked table leaks no credentials; its UNIQUE index is also how a
-- request is authenticated.
CREATE TABLE users (
    id                 BIGSERIAL PRIMARY KEY,
    email              TEXT      NOT NULL UNIQUE CHECK (char_length(email) <= 255),
    -- The Stripe customer, with a card attached, that every ride charges.
    stripe_customer_id TEXT      NOT NULL UNIQUE CHECK (char_length(stripe_customer_id) <= 50),
    api_token_hash     BYTEA     NOT NULL UNIQUE CHECK (octet_length(api_token_hash) = 32)
);

-- The key's row: one per idempotent request; owned by package idem. It
-- remembers what was asked, so that the key reused for another request is
-- refused; how far the request got, so that a retry resumes instead of
-- starting over; and the response, so that a retry of a finished request
-- replays it.
CREATE TABLE idempotency_keys (
    id              BIGSERIAL   PRIMARY KEY,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    user_id         BIGINT      NOT NULL REFERENCES users ON DELETE RESTRICT,
    -- The client's Idempotency-Key header, scoped per user (index below).
    idempotency_key TEXT        NOT NULL,

    -- The request as received, and where from (for the completer's audit).
    request_method  TEXT        NOT NULL,
    request_path    TEXT        NOT NULL,
    origin_ip       INET        NOT NULL,
    request_params  JSONB       NOT NULL,

    -- Set only on keys made while the Stripe idempotency key was derived
    -- from the row (rocket-rides-<id>-<identity>); they keep that Stripe key.
    -- A new key has none: its Stripe key comes from the client's request
    -- alone (rides.StripeKey), so a retry after a failover lost the row
    -- sends Stripe the same charge again.
    identity        UUID        NULL,

    -- When anyone last worked the key: a client's retry or the completer.
    last_run_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- How often the key was claimed; each step names its attempt.
    claims          INT         NOT NULL DEFAULT 1,

    -- The foreign state mutation's history, beyond the article. Stripe
    -- forgets an idempotency key after 24 hours, so past that a retry looks
    -- the charge up before charging again; and an outcome that stays
    -- unknown (Stripe replaying a stored 500) is retried a bounded number
    -- of times, then the key is set aside for a person with the reason, and
    -- the completer leaves it alone.
    unknown_outcomes         INT         NOT NULL DEFAULT 0,
    attention_reason         TEXT        NULL,
    first_foreign_attempt_at TIMESTAMPTZ NULL,

    -- The lock: set while a request works the key. A lock older than the
    -- lock timeout was abandoned and may be taken over. Every claim takes a
    -- new token and every phase commits only if the key still carries it
    -- (the fence, package idem), so a request whose lock was taken over can no
    -- longer move the key. locked_at, refreshed by every phase, is below.
    lock_token      UUID,

    -- What the request created (the ride's id), for reaped_keys to name.
    resource_id     BIGINT      NULL,

    -- The stored response, written together with recovery point 'finished'.
    response_code   INT         NULL,
    response_body   JSONB       NULL,

    -- The recovery point: the last atomic phase that committed. 'started'
    -- when claimed, 'finished' once the response is stored, and between
    -- them the endpoint's own (package rides: ride_created, charge_created).
    recovery_point  TEXT        NOT NULL,
    locked_at       TIMESTAMPTZ DEFAULT now(),


    -- Finished exactly when the response is stored: a replay has one.
    CONSTRAINT idempotency_keys_finished_has_response
        CHECK ((recovery_point = 'finished') = (response_code IS NOT NULL AND response_body IS NOT NULL)),
    -- Both halves of the response or neither: "response_code IS NULL" then
    -- means unfinished, which is what the completer's index is keyed on.
    CONSTRAINT idempotency_keys_response_complete
        CHECK ((response_code IS NULL) = (response_body IS NULL)),
    -- A lock without a token could not be fenced.
    CONSTRAINT idempotency_keys_lock_has_token
        CHECK ((locked_at IS NULL) = (lock_token IS NULL))
);

-- The claim arbitrates on this index (INSERT ... ON CONFLICT).
CREATE UNIQUE INDEX idempotency_keys_user_id_idempotency_key ON idempotency_keys (user_id, idempotency_key);

-- The completer's search: unfinished keys that have not run recently.
CREATE INDEX idempotency_keys_unfinished_last_run_at
    ON idempotency_keys (last_run_at)
    WHERE response_code IS NULL;

-- The reaper removes keys by age.
CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at);


-- Who did what, from where, written in the same phase as the change it
-- describes; owned by package audit. Indexed for one resource's history.
CREATE TABLE audit_records (
    id            BIGSERIAL   PRIMARY KEY,
    action        TEXT        NOT NULL CHECK (char_length(action) <= 50),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    data          JSONB       NOT NULL,
    origin_ip     INET        NOT NULL,
    resource_id   BIGINT      NOT NULL,
    resource_type TEXT        NOT NULL CHECK (char_length(resource_type) <= 50),
    user_id       BIGINT      NOT NULL REFERENCES users ON DELETE RESTRICT
);
CREATE INDEX audit_records_resource ON audit_records (resource_type, resource_id);

-- A ride, and the Stripe charge that paid for it; owned by package rides.
CREATE TABLE rides (
    id                 BIGSERIAL       PRIMARY KEY,
    created_at         TIMESTAMPTZ     NOT NULL DEFAULT now(),
    -- How a resumed request finds the ride it already created: one ride
    -- per request, however often it resumes. The key is reaped after a
    -- few days; the ride stays and loses the reference. The unique index
    -- also serves the look-up and the reaper's SET NULL.
    idempotency_key_id BIGINT          UNIQUE REFERENCES idempotency_keys ON DELETE SET NULL,
    origin_lat         NUMERIC(13, 10) NOT NULL,
    origin_lon         NUMERIC(13, 10) NOT NULL,
    target_lat         NUMERIC(13, 10) NOT NULL,
    target_lon         NUMERIC(13, 10) NOT NULL,
    amount             BIGINT          NOT NULL, -- in the currency's smallest unit
    currency           TEXT            NOT NULL,
    -- The foreign state mutation's result: ch_..., once the charge
    -- succeeded. One charge pays for one ride.
    stripe_charge_id   TEXT            UNIQUE,
    user_id            BIGINT          NOT NULL REFERENCES users ON DELETE RESTRICT,
    -- Set by the phase that settles the charge: pending until then;
    -- succeeded (charged), declined (the stored 402) or failed (the stored
    -- 502) for good; needs_review when no outcome could be settled and a
    -- person is to look. Not indexed: GET /rides?status= filters one
    -- user's rides, and an index would cost every settling an update.
    status             TEXT            NOT NULL DEFAULT 'pending',

    -- Charged exactly when it succeeded.
    CONSTRAINT rides_succeeded_has_charge CHECK ((status = 'succeeded') = (stripe_charge_id IS NOT NULL))
);

-- GET /rides lists a user's rides newest first.
CREATE INDEX rides_user_id_id ON rides (user_id, id DESC);

-- Staged jobs: inserted by an atomic phase in its own transaction, so a
-- job exists only if the phase committed; the enqueuer hands each to River
-- in the transaction that deletes it. Owned by package jobs.
CREATE TABLE staged_jobs (
    id         BIGSERIAL   PRIMARY KEY,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    job_name   TEXT        NOT NULL CHECK (char_length(job_name) BETWEEN 1 AND 100),
    job_args   JSONB       NOT NULL
);

-- One row per ride whose receipt was sent; owned by package jobs.
-- Mail cannot be unsent, so the receipt job looks here before sending and
-- records the send right after: a retried job does not mail again.
CREATE TABLE ride_receipts (
    ride_id    BIGINT      PRIMARY KEY REFERENCES rides ON DELETE RESTRICT,
    -- The charge it was for: two primaries of a split brain can hand one id
    -- to two rides, and one's receipt is not the other's.
    stripe_charge_id TEXT      NOT NULL,
    -- <ride-123.receipt@...>: a duplicate that got out anyway is known.
    message_id TEXT        NOT NULL UNIQUE CHECK (char_length(message_id) BETWEEN 1 AND 255),
    recipient  TEXT        NOT NULL CHECK (char_length(recipient) BETWEEN 1 AND 255),
    sent_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The article's "list somewhere" of requests that never finished, for a
-- person, written by the reaper in the statement that deletes the key;
-- owned by package idem. The request's ride, if any, stays in rides.
CREATE TABLE abandoned_requests (
    -- The reaped key's id, as Stripe knows it (the charge's metadata and
    -- Stripe idempotency key). Ids are never reused.
    idempotency_key_id BIGINT      PRIMARY KEY,
    user_id            BIGINT      NOT NULL REFERENCES users ON DELETE RESTRICT,
    idempotency_key    TEXT        NOT NULL,
    request_method     TEXT        NOT NULL,
    request_path       TEXT        NOT NULL,
    request_params     JSONB       NOT NULL,
    recovery_point     TEXT        NOT NULL CHECK (recovery_point <> 'finished'),
    created_at         TIMESTAMPTZ NOT NULL,
    last_run_at        TIMESTAMPTZ NOT NULL,
    reaped_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Why, in words for the person reviewing it.
    reason             TEXT        NOT NULL CHECK (char_length(reason) BETWEEN 1 AND 1000)
);
-- Not unique: a reaped key's value may be used again.
CREATE INDEX abandoned_requests_user_id_idempotency_key ON abandoned_requests (user_id, idempotency_key);

-- A record of every key the reaper deleted, written in the same statement,
-- so that a retry after the key's lifetime is refused (410), not run again;
-- owned by package idem. Kept for REAPED_KEY_RETENTION after first use.
CREATE TABLE reaped_keys (
    user_id               BIGINT      NOT NULL REFERENCES users ON DELETE RESTRICT,
    idempotency_key       TEXT        NOT NULL,
    idempotency_key_id    BIGINT      NOT NULL,
    -- The request's fingerprint, the parameters as the SHA-256 of their
    -- JSONB text: the same request is told the key expired, another one
    -- that the key was reused.
    request_method        TEXT        NOT NULL,
    request_path          TEXT        NOT NULL,
    request_params_sha256 BYTEA       NOT NULL CHECK (octet_length(request_params_sha256) = 32),
    -- The stored status (NULL: never finished) and what it created.
    response_code         INT         NULL,
    resource_id           BIGINT      NULL,
    created_at            TIMESTAMPTZ NOT NULL,
    reaped_at             TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Once per user and value: while a record exists no new key of that
    -- value is claimed (the fence retires one claimed in the very instant).
    PRIMARY KEY (user_id, idempotency_key)
);
CREATE INDEX reaped_keys_created_at ON reaped_keys (created_at);

-- Second reading: beyond the article, the machinery of the tables above
-- (the fence's plpgsql, domains, the steps, the key's page room), then the
-- reconciler's runs, the rate limits and the operator's console.

-- The fence opens every atomic phase (package idem, fence.go): most often
-- the phase's move of the key, else a lock of the key's row. It goes on
-- only if the key still carries the phase's lock token and recovery point,
-- and calls this function, which raises, if not (RR001; RR002 for a key
-- claimed as its predecessor was reaped). Raising, not answering, lets a
-- phase send BEGIN to COMMIT in one round trip: nothing after a failed
-- fence commits. The function runs only to refuse.
CREATE FUNCTION idempotency_key_fence_refuse(key_id BIGINT, point TEXT, reaped BOOLEAN) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    IF reaped THEN
        RAISE EXCEPTION 'idempotency key % has a reaped predecessor', key_id
            USING ERRCODE = 'RR002';
    END IF;
    RAISE EXCEPTION 'idempotency key % no longer carries this lock at %', key_id, point
        USING ERRCODE = 'RR001';
END
$$;

-- A phase's check of its own writes, made by Postgres for the same reason:
-- the statement's answer arrives with COMMIT's, too late to stop it (RR003).
CREATE FUNCTION idempotency_key_phase_check(ok BOOLEAN, message TEXT) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT ok THEN
        RAISE EXCEPTION '%', message USING ERRCODE = 'RR003';
    END IF;
END
$$;

-- The one-column rules of the tables above are domains, checked as a column is
-- written; a CHECK is rebuilt per row written (docs/scaling.md, "Postgres's cost per ride").
CREATE DOMAIN idempotency_key_value AS TEXT CHECK (char_length(VALUE) BETWEEN 1 AND 255);
CREATE DOMAIN request_method AS TEXT CHECK (char_length(VALUE) <= 10);
CREATE DOMAIN request_path AS TEXT CHECK (char_length(VALUE) <= 100);
CREATE DOMAIN recovery_point AS TEXT CHECK (VALUE ~ '^[a-z][a-z0-9_]{0,49}$'); -- any endpoint's
CREATE DOMAIN key_steps AS JSONB CHECK (jsonb_typeof(VALUE) = 'array');
CREATE DOMAIN claim_count AS INT CHECK (VALUE >= 1);
CREATE DOMAIN unknown_outcome_count AS INT CHECK (VALUE >= 0);
CREATE DOMAIN attention_reason AS TEXT CHECK (char_length(VALUE) <= 500);
CREATE DOMAIN latitude AS NUMERIC(13, 10) CHECK (VALUE BETWEEN -90 AND 90);
CREATE DOMAIN longitude AS NUMERIC(13, 10) CHECK (VALUE BETWEEN -180 AND 180);
CREATE DOMAIN amount AS BIGINT CHECK (VALUE > 0); -- in the currency's smallest unit
CREATE DOMAIN currency AS TEXT CHECK (VALUE ~ '^[a-z]{3}$'); -- as Stripe spells it
CREATE DOMAIN stripe_id AS TEXT CHECK (char_length(VALUE) <= 255);
CREATE DOMAIN ride_status AS TEXT CHECK (VALUE IN ('pending', 'succeeded', 'declined', 'failed', 'needs_review'));

ALTER TABLE idempotency_keys
    ALTER COLUMN idempotency_key TYPE idempotency_key_value,
    ALTER COLUMN request_method TYPE request_method,
    ALTER COLUMN request_path TYPE request_path,
    ALTER COLUMN claims TYPE claim_count,
    ALTER COLUMN unknown_outcomes TYPE unknown_outcome_count,
    ALTER COLUMN attention_reason TYPE attention_reason,
    ALTER COLUMN recovery_point TYPE recovery_point,
    -- The key's story for the console, oldest first: objects {at, event,
    -- recovery_point, actor, attempt, detail}, appended by the statement
    -- that takes the step, so a step costs no round trip. Events: claimed,
    -- resumed, took_over, reached, unknown_outcome, set_aside (detail: why),
    -- unlocked, reopened. The steps go with the key when it is reaped.
    ADD COLUMN steps key_steps NOT NULL DEFAULT '[]',
    -- Room on each page, so that a phase that changes no indexed column
    -- updates the row in place (HOT) without a new entry in every index. Such
    -- an update logs only the bytes between the first and the last column it
    -- changed, hence the columns' order: the claim's own first, the phases'
    -- last (docs/scaling.md, "Postgres's cost per ride").
    SET (fillfactor = 80);
ALTER TABLE rides
    ALTER COLUMN origin_lat TYPE latitude,
    ALTER COLUMN origin_lon TYPE longitude,
    ALTER COLUMN target_lat TYPE latitude,
    ALTER COLUMN target_lon TYPE longitude,
    ALTER COLUMN amount TYPE amount,
    ALTER COLUMN currency TYPE currency,
    ALTER COLUMN stripe_charge_id TYPE stripe_id,
    ALTER COLUMN status TYPE ride_status;
ALTER TABLE ride_receipts ALTER COLUMN stripe_charge_id TYPE stripe_id;
ALTER TABLE abandoned_requests
    ALTER COLUMN idempotency_key TYPE idempotency_key_value,
    ALTER COLUMN request_method TYPE request_method,
    ALTER COLUMN request_path TYPE request_path;
ALTER TABLE reaped_keys
    ALTER COLUMN idempotency_key TYPE idempotency_key_value,
    ALTER COLUMN request_method TYPE request_method,
    ALTER COLUMN request_path TYPE request_path;

-- The completer's index is on response_code, which only the finishing phase
-- changes, not recovery_point, which every phase changes (no update would be
-- HOT) and whose WHERE clause could lead the planner there instead of to the
-- primary key (docs/scaling.md).

-- The reconciler's latest findings (rides against Stripe's charges) and the
-- rides it restored, for the console; owned by package reconcile, which
-- keeps the recent ones.
CREATE TABLE reconcile_runs (
    id            BIGSERIAL   PRIMARY KEY,
    ran_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    since         TIMESTAMPTZ NOT NULL,
    until         TIMESTAMPTZ NOT NULL,
    charges       INT         NOT NULL CHECK (charges >= 0),
    rides         INT         NOT NULL CHECK (rides >= 0),
    pending       INT         NOT NULL CHECK (pending >= 0),
    -- Each discrepancy: {"kind", "charge_id", "ride_id", "detail"}.
    discrepancies JSONB       NOT NULL CHECK (jsonb_typeof(discrepancies) = 'array'),
    -- Each ride the run restored from its charge: {"charge_id", "ride_id"}.
    restored      JSONB       NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(restored) = 'array')
);

-- The api remembers which user a token belonged to, and checks it again in
-- the round trip of the claim it makes for that user: this raises (RR004)
-- if the user no longer holds the token as remembered, and the claim, sent
-- behind it, is skipped. Package user says more.
CREATE FUNCTION api_token_check(holds BOOLEAN) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT holds THEN
        RAISE EXCEPTION 'the API token no longer belongs to the user it was remembered for'
            USING ERRCODE = 'RR004';
    END IF;
END
$$;

-- The edge's rate limits' counts (requests per token, failed
-- authentications per address), one fixed window per limit and subject;
-- owned by package ratelimit, which says more. UNLOGGED: no WAL and no
-- flush to wait for; a crash only starts the windows over.
CREATE UNLOGGED TABLE rate_limit_windows (
    policy  TEXT        NOT NULL,
    subject TEXT        NOT NULL,
    hits    BIGINT      NOT NULL,
    ends_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (policy, subject)
);

-- The charge cap's counts, one sliding window per user; owned by package
-- ratelimit (charges.go), which says more. counts holds the user's charges
-- in the last eleven tenths of a window, a tenth to an element, newest
-- first; slot numbers the newest tenth since the epoch, and ends_at is when
-- its charges leave the window. UNLOGGED, as rate_limit_windows.
CREATE UNLOGGED TABLE rate_limit_charges (
    user_id BIGINT      PRIMARY KEY,
    slot    BIGINT      NOT NULL,
    counts  INT[]       NOT NULL CHECK (cardinality(counts) BETWEEN 1 AND 11),
    hits    BIGINT      NOT NULL,
    quota   BIGINT      NOT NULL,
    ends_at TIMESTAMPTZ NOT NULL,
    CHECK (hits <= quota)
);

-- The console's accounts, one per person; owned by package operator. The
-- name is what every settlement's audit record carries (the rules of
-- rides.ValidOperator), and the password is kept only as its argon2id hash
-- (PHC string form, its parameters inside), so a leaked table leaks no
-- password outright. A disabled account stays, so that the audit records
-- naming it still name someone.
CREATE TABLE operators (
    id              BIGSERIAL   PRIMARY KEY,
    name            TEXT        NOT NULL UNIQUE CHECK (char_length(name) BETWEEN 1 AND 100 AND name = btrim(name)),
    password_hash   TEXT        NOT NULL CHECK (password_hash LIKE '$argon2id$%' AND char_length(password_hash) <= 200),
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- When the password was last set: at creation, or by a reset.
    password_set_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    disabled_at     TIMESTAMPTZ NULL
);

-- The console's sessions, kept here so that logging out, disabling the
-- account or resetting its password ends them; owned by package operator.
-- The cookie holds a random token and this table only its SHA-256, so a
-- copy of the table logs no one in. secret keys the session's form token
-- and the messages the console shows it.
CREATE TABLE operator_sessions (
    token_sha256 BYTEA       PRIMARY KEY CHECK (octet_length(token_sha256) = 32),
    operator_id  BIGINT      NOT NULL REFERENCES operators ON DELETE CASCADE,
    secret       BYTEA       NOT NULL CHECK (octet_length(secret) = 32),
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at   TIMESTAMPTZ NOT NULL
);
CREATE INDEX operator_sessions_operator_id ON operator_sessions (operator_id);
CREATE INDEX operator_sessions_expires_at ON operator_sessions (expires_at);

-- Console logins not yet proved right, counted per account name and per
-- client address (an IPv6 address by its /64), so that guessing slows down
-- whichever of the two the guesser holds still; owned by package operator.
-- An attempt is counted before its password is checked and given back
-- when it proves right, so that parallel guesses cannot slip past the
-- count; once a few have failed, each further attempt waits until
-- wait_until. Rows are forgotten a while after their wait ended.
CREATE TABLE operator_login_failures (
    scope      TEXT        NOT NULL CHECK (scope IN ('account', 'address')),
    subject    TEXT        NOT NULL CHECK (char_length(subject) BETWEEN 1 AND 100),
    failures   INT         NOT NULL CHECK (failures >= 0),
    wait_until TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (scope, subject)
);
CREATE INDEX operator_login_failures_wait_until ON operator_login_failures (wait_until);

-- Traces (package trace of the platform): the W3C traceparent of the
-- request that claimed a key, and of the phase that staged a job, when
-- that request was traced. The completer's resume, a client's later retry
-- and the job's run link back to it; NULL when nothing was traced.
CREATE DOMAIN traceparent AS TEXT CHECK (VALUE ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$');
ALTER TABLE idempotency_keys ADD COLUMN traceparent traceparent;
ALTER TABLE staged_jobs ADD COLUMN traceparent traceparent;
