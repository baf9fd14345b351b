ALTER TABLE idempotency_keys
    DROP COLUMN attention_reason,
    DROP COLUMN first_foreign_attempt_at,
    DROP COLUMN unknown_outcomes;
