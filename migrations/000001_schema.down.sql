-- Everything 000001_schema.up.sql created, referencing tables first.
DROP TABLE abandoned_requests;
DROP TABLE ride_receipts;
DROP TABLE staged_jobs;
DROP TABLE rides;
DROP TABLE audit_records;
DROP TABLE idempotency_keys;
DROP TABLE users;
