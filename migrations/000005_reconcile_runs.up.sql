-- The reconciler's latest findings, kept so that a person can read them
-- (the console) and not only the log lines an alert fires on. Owned by
-- package reconcile; each run writes one row and forgets all but the most
-- recent ones.
CREATE TABLE reconcile_runs (
    id            BIGSERIAL   PRIMARY KEY,
    ran_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- The window compared.
    since         TIMESTAMPTZ NOT NULL,
    until         TIMESTAMPTZ NOT NULL,
    charges       INT         NOT NULL CHECK (charges >= 0),
    rides         INT         NOT NULL CHECK (rides >= 0),
    pending       INT         NOT NULL CHECK (pending >= 0),
    -- Each discrepancy: {"kind", "charge_id", "ride_id", "detail"}.
    discrepancies JSONB       NOT NULL CHECK (jsonb_typeof(discrepancies) = 'array')
);
