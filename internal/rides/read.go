package rides

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reads for an operator (the console), across users. The api's reads are
// scoped to the caller; these are not, and nothing a client reaches calls
// them.

// RideByID returns ride id, whoever's it is.
func RideByID(ctx context.Context, q querier, id int64) (*Ride, error) {
	return oneRide(ctx, q, fmt.Sprintf("%d", id), `
		SELECT id, created_at, status, origin_lat::float8, origin_lon::float8, target_lat::float8,
		       target_lon::float8, amount, currency, stripe_charge_id, user_id, idempotency_key_id
		FROM rides
		WHERE id = $1::bigint`, id)
}

// RideByKey returns the ride idempotency key keyID created.
func RideByKey(ctx context.Context, q querier, keyID int64) (*Ride, error) {
	return rideByKey(ctx, q, keyID)
}

// RideByCharge returns the ride Stripe charge chargeID paid for.
func RideByCharge(ctx context.Context, q querier, chargeID string) (*Ride, error) {
	return oneRide(ctx, q, "charged "+chargeID, `
		SELECT id, created_at, status, origin_lat::float8, origin_lon::float8, target_lat::float8,
		       target_lon::float8, amount, currency, stripe_charge_id, user_id, idempotency_key_id
		FROM rides
		WHERE stripe_charge_id = $1::text`, chargeID)
}

// CountByStatus counts every ride by status.
func CountByStatus(ctx context.Context, q querier) (map[Status]int, error) {
	rows, err := q.Query(ctx, `SELECT status, count(*) FROM rides GROUP BY status`)
	if err != nil {
		return nil, fmt.Errorf("count rides: %w", err)
	}
	out := map[Status]int{}
	var (
		s Status
		n int
	)
	if _, err := pgx.ForEachRow(rows, []any{&s, &n}, func() error { out[s] = n; return nil }); err != nil {
		return nil, fmt.Errorf("count rides: %w", err)
	}
	return out, nil
}

// CountSince counts the rides created since since.
func CountSince(ctx context.Context, q querier, since time.Time) (int, error) {
	rows, err := q.Query(ctx, `SELECT count(*) FROM rides WHERE created_at >= $1`, since)
	if err != nil {
		return 0, fmt.Errorf("count rides since %s: %w", since.Format(time.RFC3339), err)
	}
	n, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[int])
	if err != nil {
		return 0, fmt.Errorf("count rides since %s: %w", since.Format(time.RFC3339), err)
	}
	return n, nil
}
