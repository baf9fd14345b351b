CREATE DOMAIN public.amount AS bigint
	CONSTRAINT amount_check CHECK ((VALUE > 0));

CREATE DOMAIN public.attention_reason AS text
	CONSTRAINT attention_reason_check CHECK ((char_length(VALUE) <= 500));

CREATE DOMAIN public.claim_count AS integer
	CONSTRAINT claim_count_check CHECK ((VALUE >= 1));

CREATE DOMAIN public.currency AS text
	CONSTRAINT currency_check CHECK ((VALUE ~ '^[a-z]{3}$'::text));

CREATE DOMAIN public.idempotency_key_value AS text
	CONSTRAINT idempotency_key_value_check CHECK (((char_length(VALUE) >= 1) AND (char_length(VALUE) <= 255)));

CREATE DOMAIN public.key_steps AS jsonb
	CONSTRAINT key_steps_check CHECK ((jsonb_typeof(VALUE) = 'array'::text));

CREATE DOMAIN public.latitude AS numeric(13,10)
	CONSTRAINT latitude_check CHECK (((VALUE >= ('-90'::integer)::numeric) AND (VALUE <= (90)::numeric)));

CREATE DOMAIN public.longitude AS numeric(13,10)
	CONSTRAINT longitude_check CHECK (((VALUE >= ('-180'::integer)::numeric) AND (VALUE <= (180)::numeric)));

CREATE DOMAIN public.recovery_point AS text
	CONSTRAINT recovery_point_check CHECK ((VALUE ~ '^[a-z][a-z0-9_]{0,49}$'::text));

CREATE DOMAIN public.request_method AS text
	CONSTRAINT request_method_check CHECK ((char_length(VALUE) <= 10));

CREATE DOMAIN public.request_path AS text
	CONSTRAINT request_path_check CHECK ((char_length(VALUE) <= 100));

CREATE DOMAIN public.ride_status AS text
	CONSTRAINT ride_status_check CHECK ((VALUE = ANY (ARRAY['pending'::text, 'succeeded'::text, 'declined'::text, 'failed'::text, 'needs_review'::text])));

CREATE DOMAIN public.stripe_id AS text
	CONSTRAINT stripe_id_check CHECK ((char_length(VALUE) <= 255));

CREATE DOMAIN public.traceparent AS text
	CONSTRAINT traceparent_check CHECK ((VALUE ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'::text));

CREATE DOMAIN public.unknown_outcome_count AS integer
	CONSTRAINT unknown_outcome_count_check CHECK ((VALUE >= 0));

CREATE FUNCTION public.api_token_check(holds boolean) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NOT holds THEN
        RAISE EXCEPTION 'the API token no longer belongs to the user it was remembered for'
            USING ERRCODE = 'RR004';
    END IF;
END
$$;

CREATE FUNCTION public.idempotency_key_fence_refuse(key_id bigint, point text, reaped boolean) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF reaped THEN
        RAISE EXCEPTION 'idempotency key % has a reaped predecessor', key_id
            USING ERRCODE = 'RR002';
    END IF;
    RAISE EXCEPTION 'idempotency key % no longer carries this lock at %', key_id, point
        USING ERRCODE = 'RR001';
END
$$;

CREATE FUNCTION public.idempotency_key_phase_check(ok boolean, message text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NOT ok THEN
        RAISE EXCEPTION '%', message USING ERRCODE = 'RR003';
    END IF;
END
$$;

CREATE TABLE public.abandoned_requests (
    idempotency_key_id bigint NOT NULL,
    user_id bigint NOT NULL,
    idempotency_key public.idempotency_key_value NOT NULL,
    request_method public.request_method NOT NULL,
    request_path public.request_path NOT NULL,
    request_params jsonb NOT NULL,
    recovery_point text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    last_run_at timestamp with time zone NOT NULL,
    reaped_at timestamp with time zone DEFAULT now() NOT NULL,
    reason text NOT NULL,
    CONSTRAINT abandoned_requests_reason_check CHECK (((char_length(reason) >= 1) AND (char_length(reason) <= 1000))),
    CONSTRAINT abandoned_requests_recovery_point_check CHECK ((recovery_point <> 'finished'::text))
);

CREATE TABLE public.audit_records (
    id bigint NOT NULL,
    action text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    data jsonb NOT NULL,
    origin_ip inet NOT NULL,
    resource_id bigint NOT NULL,
    resource_type text NOT NULL,
    user_id bigint NOT NULL,
    CONSTRAINT audit_records_action_check CHECK ((char_length(action) <= 50)),
    CONSTRAINT audit_records_resource_type_check CHECK ((char_length(resource_type) <= 50))
);

CREATE SEQUENCE public.audit_records_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.audit_records_id_seq OWNED BY public.audit_records.id;

CREATE TABLE public.idempotency_keys (
    id bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    user_id bigint NOT NULL,
    idempotency_key public.idempotency_key_value NOT NULL,
    request_method public.request_method NOT NULL,
    request_path public.request_path NOT NULL,
    origin_ip inet NOT NULL,
    request_params jsonb NOT NULL,
    identity uuid,
    last_run_at timestamp with time zone DEFAULT now() NOT NULL,
    claims public.claim_count DEFAULT 1 NOT NULL,
    unknown_outcomes public.unknown_outcome_count DEFAULT 0 NOT NULL,
    attention_reason public.attention_reason,
    first_foreign_attempt_at timestamp with time zone,
    lock_token uuid,
    resource_id bigint,
    response_code integer,
    response_body jsonb,
    recovery_point public.recovery_point NOT NULL,
    locked_at timestamp with time zone DEFAULT now(),
    steps public.key_steps DEFAULT '[]'::jsonb NOT NULL,
    traceparent public.traceparent,
    CONSTRAINT idempotency_keys_finished_has_response CHECK ((((recovery_point)::text = 'finished'::text) = ((response_code IS NOT NULL) AND (response_body IS NOT NULL)))),
    CONSTRAINT idempotency_keys_lock_has_token CHECK (((locked_at IS NULL) = (lock_token IS NULL))),
    CONSTRAINT idempotency_keys_response_complete CHECK (((response_code IS NULL) = (response_body IS NULL)))
)
WITH (fillfactor='80');

CREATE SEQUENCE public.idempotency_keys_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.idempotency_keys_id_seq OWNED BY public.idempotency_keys.id;

CREATE TABLE public.operator_login_failures (
    scope text NOT NULL,
    subject text NOT NULL,
    failures integer NOT NULL,
    wait_until timestamp with time zone NOT NULL,
    CONSTRAINT operator_login_failures_failures_check CHECK ((failures >= 0)),
    CONSTRAINT operator_login_failures_scope_check CHECK ((scope = ANY (ARRAY['account'::text, 'address'::text]))),
    CONSTRAINT operator_login_failures_subject_check CHECK (((char_length(subject) >= 1) AND (char_length(subject) <= 100)))
);

CREATE TABLE public.operator_sessions (
    token_sha256 bytea NOT NULL,
    operator_id bigint NOT NULL,
    secret bytea NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    CONSTRAINT operator_sessions_secret_check CHECK ((octet_length(secret) = 32)),
    CONSTRAINT operator_sessions_token_sha256_check CHECK ((octet_length(token_sha256) = 32))
);

CREATE TABLE public.operators (
    id bigint NOT NULL,
    name text NOT NULL,
    password_hash text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    password_set_at timestamp with time zone DEFAULT now() NOT NULL,
    disabled_at timestamp with time zone,
    CONSTRAINT operators_name_check CHECK ((((char_length(name) >= 1) AND (char_length(name) <= 100)) AND (name = btrim(name)))),
    CONSTRAINT operators_password_hash_check CHECK (((password_hash ~~ '$argon2id$%'::text) AND (char_length(password_hash) <= 200)))
);

CREATE SEQUENCE public.operators_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.operators_id_seq OWNED BY public.operators.id;

CREATE UNLOGGED TABLE public.rate_limit_charges (
    user_id bigint NOT NULL,
    slot bigint NOT NULL,
    counts integer[] NOT NULL,
    hits bigint NOT NULL,
    quota bigint NOT NULL,
    ends_at timestamp with time zone NOT NULL,
    CONSTRAINT rate_limit_charges_check CHECK ((hits <= quota)),
    CONSTRAINT rate_limit_charges_counts_check CHECK (((cardinality(counts) >= 1) AND (cardinality(counts) <= 11)))
);

CREATE UNLOGGED TABLE public.rate_limit_windows (
    policy text NOT NULL,
    subject text NOT NULL,
    hits bigint NOT NULL,
    ends_at timestamp with time zone NOT NULL
);

CREATE TABLE public.reaped_keys (
    user_id bigint NOT NULL,
    idempotency_key public.idempotency_key_value NOT NULL,
    idempotency_key_id bigint NOT NULL,
    request_method public.request_method NOT NULL,
    request_path public.request_path NOT NULL,
    request_params_sha256 bytea NOT NULL,
    response_code integer,
    resource_id bigint,
    created_at timestamp with time zone NOT NULL,
    reaped_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT reaped_keys_request_params_sha256_check CHECK ((octet_length(request_params_sha256) = 32))
);

CREATE TABLE public.reconcile_runs (
    id bigint NOT NULL,
    ran_at timestamp with time zone DEFAULT now() NOT NULL,
    since timestamp with time zone NOT NULL,
    until timestamp with time zone NOT NULL,
    charges integer NOT NULL,
    rides integer NOT NULL,
    pending integer NOT NULL,
    discrepancies jsonb NOT NULL,
    restored jsonb DEFAULT '[]'::jsonb NOT NULL,
    CONSTRAINT reconcile_runs_charges_check CHECK ((charges >= 0)),
    CONSTRAINT reconcile_runs_discrepancies_check CHECK ((jsonb_typeof(discrepancies) = 'array'::text)),
    CONSTRAINT reconcile_runs_pending_check CHECK ((pending >= 0)),
    CONSTRAINT reconcile_runs_restored_check CHECK ((jsonb_typeof(restored) = 'array'::text)),
    CONSTRAINT reconcile_runs_rides_check CHECK ((rides >= 0))
);

CREATE SEQUENCE public.reconcile_runs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.reconcile_runs_id_seq OWNED BY public.reconcile_runs.id;

CREATE TABLE public.ride_receipts (
    ride_id bigint NOT NULL,
    stripe_charge_id public.stripe_id NOT NULL,
    message_id text NOT NULL,
    recipient text NOT NULL,
    sent_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT ride_receipts_message_id_check CHECK (((char_length(message_id) >= 1) AND (char_length(message_id) <= 255))),
    CONSTRAINT ride_receipts_recipient_check CHECK (((char_length(recipient) >= 1) AND (char_length(recipient) <= 255)))
);

CREATE TABLE public.rides (
    id bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    idempotency_key_id bigint,
    origin_lat public.latitude NOT NULL,
    origin_lon public.longitude NOT NULL,
    target_lat public.latitude NOT NULL,
    target_lon public.longitude NOT NULL,
    amount public.amount NOT NULL,
    currency public.currency NOT NULL,
    stripe_charge_id public.stripe_id,
    user_id bigint NOT NULL,
    status public.ride_status DEFAULT 'pending'::text NOT NULL,
    CONSTRAINT rides_succeeded_has_charge CHECK ((((status)::text = 'succeeded'::text) = (stripe_charge_id IS NOT NULL)))
);

CREATE SEQUENCE public.rides_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.rides_id_seq OWNED BY public.rides.id;

CREATE TABLE public.schema_migrations (
    version bigint NOT NULL,
    dirty boolean NOT NULL
);

CREATE TABLE public.staged_jobs (
    id bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    job_name text NOT NULL,
    job_args jsonb NOT NULL,
    traceparent public.traceparent,
    CONSTRAINT staged_jobs_job_name_check CHECK (((char_length(job_name) >= 1) AND (char_length(job_name) <= 100)))
);

CREATE SEQUENCE public.staged_jobs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.staged_jobs_id_seq OWNED BY public.staged_jobs.id;

CREATE TABLE public.users (
    id bigint NOT NULL,
    email text NOT NULL,
    stripe_customer_id text NOT NULL,
    api_token_hash bytea NOT NULL,
    CONSTRAINT users_api_token_hash_check CHECK ((octet_length(api_token_hash) = 32)),
    CONSTRAINT users_email_check CHECK ((char_length(email) <= 255)),
    CONSTRAINT users_stripe_customer_id_check CHECK ((char_length(stripe_customer_id) <= 50))
);

CREATE SEQUENCE public.users_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.users_id_seq OWNED BY public.users.id;

ALTER TABLE ONLY public.audit_records ALTER COLUMN id SET DEFAULT nextval('public.audit_records_id_seq'::regclass);

ALTER TABLE ONLY public.idempotency_keys ALTER COLUMN id SET DEFAULT nextval('public.idempotency_keys_id_seq'::regclass);

ALTER TABLE ONLY public.operators ALTER COLUMN id SET DEFAULT nextval('public.operators_id_seq'::regclass);

ALTER TABLE ONLY public.reconcile_runs ALTER COLUMN id SET DEFAULT nextval('public.reconcile_runs_id_seq'::regclass);

ALTER TABLE ONLY public.rides ALTER COLUMN id SET DEFAULT nextval('public.rides_id_seq'::regclass);

ALTER TABLE ONLY public.staged_jobs ALTER COLUMN id SET DEFAULT nextval('public.staged_jobs_id_seq'::regclass);

ALTER TABLE ONLY public.users ALTER COLUMN id SET DEFAULT nextval('public.users_id_seq'::regclass);

ALTER TABLE ONLY public.abandoned_requests
    ADD CONSTRAINT abandoned_requests_pkey PRIMARY KEY (idempotency_key_id);

ALTER TABLE ONLY public.audit_records
    ADD CONSTRAINT audit_records_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.idempotency_keys
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.operator_login_failures
    ADD CONSTRAINT operator_login_failures_pkey PRIMARY KEY (scope, subject);

ALTER TABLE ONLY public.operator_sessions
    ADD CONSTRAINT operator_sessions_pkey PRIMARY KEY (token_sha256);

ALTER TABLE ONLY public.operators
    ADD CONSTRAINT operators_name_key UNIQUE (name);

ALTER TABLE ONLY public.operators
    ADD CONSTRAINT operators_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.rate_limit_charges
    ADD CONSTRAINT rate_limit_charges_pkey PRIMARY KEY (user_id);

ALTER TABLE ONLY public.rate_limit_windows
    ADD CONSTRAINT rate_limit_windows_pkey PRIMARY KEY (policy, subject);

ALTER TABLE ONLY public.reaped_keys
    ADD CONSTRAINT reaped_keys_pkey PRIMARY KEY (user_id, idempotency_key);

ALTER TABLE ONLY public.reconcile_runs
    ADD CONSTRAINT reconcile_runs_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.ride_receipts
    ADD CONSTRAINT ride_receipts_message_id_key UNIQUE (message_id);

ALTER TABLE ONLY public.ride_receipts
    ADD CONSTRAINT ride_receipts_pkey PRIMARY KEY (ride_id);

ALTER TABLE ONLY public.rides
    ADD CONSTRAINT rides_idempotency_key_id_key UNIQUE (idempotency_key_id);

ALTER TABLE ONLY public.rides
    ADD CONSTRAINT rides_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.rides
    ADD CONSTRAINT rides_stripe_charge_id_key UNIQUE (stripe_charge_id);

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

ALTER TABLE ONLY public.staged_jobs
    ADD CONSTRAINT staged_jobs_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.users
    ADD CONSTRAINT users_api_token_hash_key UNIQUE (api_token_hash);

ALTER TABLE ONLY public.users
    ADD CONSTRAINT users_email_key UNIQUE (email);

ALTER TABLE ONLY public.users
    ADD CONSTRAINT users_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.users
    ADD CONSTRAINT users_stripe_customer_id_key UNIQUE (stripe_customer_id);

CREATE INDEX abandoned_requests_user_id_idempotency_key ON public.abandoned_requests USING btree (user_id, idempotency_key);

CREATE INDEX audit_records_resource ON public.audit_records USING btree (resource_type, resource_id);

CREATE INDEX idempotency_keys_created_at ON public.idempotency_keys USING btree (created_at);

CREATE INDEX idempotency_keys_unfinished_last_run_at ON public.idempotency_keys USING btree (last_run_at) WHERE (response_code IS NULL);

CREATE UNIQUE INDEX idempotency_keys_user_id_idempotency_key ON public.idempotency_keys USING btree (user_id, idempotency_key);

CREATE INDEX operator_login_failures_wait_until ON public.operator_login_failures USING btree (wait_until);

CREATE INDEX operator_sessions_expires_at ON public.operator_sessions USING btree (expires_at);

CREATE INDEX operator_sessions_operator_id ON public.operator_sessions USING btree (operator_id);

CREATE INDEX reaped_keys_created_at ON public.reaped_keys USING btree (created_at);

CREATE INDEX rides_user_id_id ON public.rides USING btree (user_id, id DESC);

ALTER TABLE ONLY public.abandoned_requests
    ADD CONSTRAINT abandoned_requests_user_id_fkey FOREIGN KEY (user_id) REFERENCES public.users(id) ON DELETE RESTRICT;

ALTER TABLE ONLY public.audit_records
    ADD CONSTRAINT audit_records_user_id_fkey FOREIGN KEY (user_id) REFERENCES public.users(id) ON DELETE RESTRICT;

ALTER TABLE ONLY public.idempotency_keys
    ADD CONSTRAINT idempotency_keys_user_id_fkey FOREIGN KEY (user_id) REFERENCES public.users(id) ON DELETE RESTRICT;

ALTER TABLE ONLY public.operator_sessions
    ADD CONSTRAINT operator_sessions_operator_id_fkey FOREIGN KEY (operator_id) REFERENCES public.operators(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.reaped_keys
    ADD CONSTRAINT reaped_keys_user_id_fkey FOREIGN KEY (user_id) REFERENCES public.users(id) ON DELETE RESTRICT;

ALTER TABLE ONLY public.ride_receipts
    ADD CONSTRAINT ride_receipts_ride_id_fkey FOREIGN KEY (ride_id) REFERENCES public.rides(id) ON DELETE RESTRICT;

ALTER TABLE ONLY public.rides
    ADD CONSTRAINT rides_idempotency_key_id_fkey FOREIGN KEY (idempotency_key_id) REFERENCES public.idempotency_keys(id) ON DELETE SET NULL;

ALTER TABLE ONLY public.rides
    ADD CONSTRAINT rides_user_id_fkey FOREIGN KEY (user_id) REFERENCES public.users(id) ON DELETE RESTRICT;
