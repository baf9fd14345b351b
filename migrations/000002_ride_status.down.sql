-- Everything 000002_ride_status.up.sql added, stored responses included.
UPDATE idempotency_keys
SET response_body = response_body - 'ride_id'
WHERE request_path = '/rides' AND response_code IN (402, 502);

UPDATE idempotency_keys
SET response_body = response_body - 'status'
WHERE request_path = '/rides' AND response_code = 201;

ALTER TABLE rides
    DROP CONSTRAINT rides_succeeded_has_charge,
    DROP COLUMN status;
