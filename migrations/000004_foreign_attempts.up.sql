-- What the key remembers about its foreign state mutation (the Stripe
-- charge), so that a retry can tell since when the charge has been tried
-- and how often it ended with an outcome nobody can know:
--
--   * Stripe forgets an idempotency key after 24 hours. A retry after that
--     would charge again, so past that window the charge is first looked
--     up at Stripe and adopted if it exists.
--   * An outcome that stays unknown however often it is retried (Stripe
--     keeps replaying a stored 500) must not be retried forever: after a
--     bounded number of attempts the key is set aside for a human, with
--     the reason, and the completer leaves it alone.
ALTER TABLE idempotency_keys
    ADD COLUMN unknown_outcomes         INT         NOT NULL DEFAULT 0
        CHECK (unknown_outcomes >= 0),
    ADD COLUMN first_foreign_attempt_at TIMESTAMPTZ NULL,
    ADD COLUMN attention_reason         TEXT        NULL
        CHECK (char_length(attention_reason) <= 500);
