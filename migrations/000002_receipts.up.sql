-- One row per ride whose receipt was sent, owned by the receipt worker.
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
