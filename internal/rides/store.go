// Second reading: the rides table's statements, which only this package
// writes. The phase functions of the DAG (request.go) queue them by name:
// insertRide, recordCharge, settleRide.

package rides

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rocketrides/rocketrides/internal/idem"
)

// ErrNotFound means no ride matched.
var ErrNotFound = errors.New("ride not found")

// Status is where a ride stands in its lifecycle. The atomic phase that
// settles the ride's charge sets it, in the same transaction.
type Status string

// The statuses of a ride. Pending and needs_review can still change; the
// others are final.
const (
	// StatusPending: created, its charge not settled yet. A retry with
	// the same Idempotency-Key, or the completer, settles it.
	StatusPending Status = "pending"
	// StatusSucceeded: charged; the ride has its stripe_charge_id.
	StatusSucceeded Status = "succeeded"
	// StatusDeclined: the card was declined (the stored 402).
	StatusDeclined Status = "declined"
	// StatusFailed: the payment provider rejected the charge (the stored
	// 502).
	StatusFailed Status = "failed"
	// StatusNeedsReview: the charge's outcome could not be settled
	// automatically; a person looks, and the ride moves on once they
	// have.
	StatusNeedsReview Status = "needs_review"
)

// Statuses lists every status, in lifecycle order.
var Statuses = []Status{StatusPending, StatusSucceeded, StatusDeclined, StatusFailed, StatusNeedsReview}

// Final reports whether a ride with status s can no longer change.
func (s Status) Final() bool { return s != StatusPending && s != StatusNeedsReview }

// Ride is a row of rides, and the JSON a client sees.
type Ride struct {
	ID               int64     `db:"id" json:"id"`
	CreatedAt        Timestamp `db:"created_at" json:"created_at"`
	Status           Status    `db:"status" json:"status"`
	OriginLat        float64   `db:"origin_lat" json:"origin_lat"`
	OriginLon        float64   `db:"origin_lon" json:"origin_lon"`
	TargetLat        float64   `db:"target_lat" json:"target_lat"`
	TargetLon        float64   `db:"target_lon" json:"target_lon"`
	Amount           int64     `db:"amount" json:"amount"`
	Currency         string    `db:"currency" json:"currency"`
	StripeChargeID   *string   `db:"stripe_charge_id" json:"stripe_charge_id"`
	UserID           int64     `db:"user_id" json:"-"`
	IdempotencyKeyID *int64    `db:"idempotency_key_id" json:"-"`
}

type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// rideSequence gives rides their ids: the phase that creates a ride draws
// its id from it as it moves the key (idem.Outcome.Creates), and the
// ride takes it (see insertRide).
const rideSequence = "rides_id_seq"

// insertRide queues the creation of the ride in an atomic phase. stored
// receives the ride as stored (coordinates as rounded by their NUMERIC
// columns), so what the client sees is what a later read returns; it is
// called when the phase's statements have run, before the phase commits.
// The ride's id is the one the phase's move drew from rideSequence, ahead
// of this statement (the phase says Creates(rideSequence) first); no
// statement waits for it: those queued after this one name the ride by
// the same sequence.
func insertRide(tx *idem.Tx, keyID, userID int64, p Params, stored func(*Ride)) {
	tx.Queue(`
		INSERT INTO rides (id, idempotency_key_id, origin_lat, origin_lon, target_lat, target_lon,
		                   amount, currency, user_id, status)
		VALUES (currval($9::text::regclass), $1, $2, $3, $4, $5, $6, $7, $8, 'pending')
		RETURNING id, created_at, status, origin_lat::float8, origin_lon::float8, target_lat::float8,
		          target_lon::float8, amount, currency, stripe_charge_id, user_id, idempotency_key_id`,
		keyID, p.OriginLat, p.OriginLon, p.TargetLat, p.TargetLon, Price, Currency, userID, rideSequence,
	).Query(func(rows pgx.Rows) error {
		ride, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Ride])
		if err != nil {
			return fmt.Errorf("insert ride for key %d: %w", keyID, err)
		}
		stored(ride)
		return nil
	})
}

// rideByKeySQL finds the ride an idempotency key ($1) created.
const rideByKeySQL = `
	SELECT id, created_at, status, origin_lat::float8, origin_lon::float8, target_lat::float8,
	       target_lon::float8, amount, currency, stripe_charge_id, user_id, idempotency_key_id
	FROM rides
	WHERE idempotency_key_id = $1::bigint`

// rideByKey finds the ride an idempotency key created.
func rideByKey(ctx context.Context, q querier, keyID int64) (*Ride, error) {
	return oneRide(ctx, q, fmt.Sprintf("for key %d", keyID), rideByKeySQL, keyID)
}

// rideByKeyIn is rideByKey inside an atomic phase; it flushes tx.
func rideByKeyIn(ctx context.Context, tx *idem.Tx, keyID int64) (*Ride, error) {
	return flushOneRide(ctx, tx, fmt.Sprintf("for key %d", keyID), rideByKeySQL, keyID)
}

// rideByCharge finds the ride that records charge chargeID.
func rideByCharge(ctx context.Context, q querier, chargeID string) (*Ride, error) {
	return oneRide(ctx, q, "recording charge "+chargeID, `
		SELECT id, created_at, status, origin_lat::float8, origin_lon::float8, target_lat::float8,
		       target_lon::float8, amount, currency, stripe_charge_id, user_id, idempotency_key_id
		FROM rides
		WHERE stripe_charge_id = $1`, chargeID)
}

// rideByID finds a ride of a user; another user's ride is not found.
func rideByID(ctx context.Context, q querier, userID, id int64) (*Ride, error) {
	return oneRide(ctx, q, fmt.Sprintf("%d", id), `
		SELECT id, created_at, status, origin_lat::float8, origin_lon::float8, target_lat::float8,
		       target_lon::float8, amount, currency, stripe_charge_id, user_id, idempotency_key_id
		FROM rides
		WHERE id = $1::bigint AND user_id = $2::bigint`, id, userID)
}

// The statements of listRides: a user's rides ($1), newest first, at most
// $2, with one statement for each combination of the filters, older than a
// ride ($3) and with a status (the last parameter), so that each
// combination gets its own plan on rides_user_id_id.
const (
	listRidesSQL = `
		SELECT id, created_at, status, origin_lat::float8, origin_lon::float8, target_lat::float8,
		       target_lon::float8, amount, currency, stripe_charge_id, user_id, idempotency_key_id
		FROM rides
		WHERE user_id = $1::bigint
		ORDER BY id DESC LIMIT $2::int`
	listRidesBeforeSQL = `
		SELECT id, created_at, status, origin_lat::float8, origin_lon::float8, target_lat::float8,
		       target_lon::float8, amount, currency, stripe_charge_id, user_id, idempotency_key_id
		FROM rides
		WHERE user_id = $1::bigint AND id < $3::bigint
		ORDER BY id DESC LIMIT $2::int`
	listRidesWithStatusSQL = `
		SELECT id, created_at, status, origin_lat::float8, origin_lon::float8, target_lat::float8,
		       target_lon::float8, amount, currency, stripe_charge_id, user_id, idempotency_key_id
		FROM rides
		WHERE user_id = $1::bigint AND status = $3::text
		ORDER BY id DESC LIMIT $2::int`
	listRidesBeforeWithStatusSQL = `
		SELECT id, created_at, status, origin_lat::float8, origin_lon::float8, target_lat::float8,
		       target_lon::float8, amount, currency, stripe_charge_id, user_id, idempotency_key_id
		FROM rides
		WHERE user_id = $1::bigint AND id < $3::bigint AND status = $4::text
		ORDER BY id DESC LIMIT $2::int`
)

// listRides returns up to limit rides of a user, newest first, older than
// the ride startingAfter when it is non-zero, and only those with status
// when it is not empty.
func listRides(ctx context.Context, q querier, userID, startingAfter int64, status Status, limit int) ([]*Ride, error) {
	var (
		rows pgx.Rows
		err  error
	)
	switch {
	case startingAfter != 0 && status != "":
		rows, err = q.Query(ctx, listRidesBeforeWithStatusSQL, userID, limit, startingAfter, string(status))
	case startingAfter != 0:
		rows, err = q.Query(ctx, listRidesBeforeSQL, userID, limit, startingAfter)
	case status != "":
		rows, err = q.Query(ctx, listRidesWithStatusSQL, userID, limit, string(status))
	default:
		rows, err = q.Query(ctx, listRidesSQL, userID, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("list rides of user %d: %w", userID, err)
	}
	rides, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByName[Ride])
	if err != nil {
		return nil, fmt.Errorf("list rides of user %d: %w", userID, err)
	}
	return rides, nil
}

// recordCharge queues the storing of the Stripe charge on the ride, which
// thereby succeeded. Writing the same charge again is harmless; a
// different charge for a ride that already has one would mean a double
// charge, and a charge for a ride settled otherwise (declined, failed)
// contradicts it: the statement refuses both, failing the phase. Postgres
// makes the check (idempotency_key_phase_check, which raises with the
// message $3): the statement's answer comes back with the phase's
// COMMIT's, too late for a check made on it here to stop the commit.
func recordCharge(tx *idem.Tx, rideID int64, chargeID string) {
	tx.Queue(`
		WITH changed AS (
			UPDATE rides SET stripe_charge_id = $2, status = 'succeeded'
			WHERE id = $1::bigint
			  AND status IN ('pending', 'needs_review', 'succeeded')
			  AND (stripe_charge_id IS NULL OR stripe_charge_id = $2)
			RETURNING 1
		)
		SELECT idempotency_key_phase_check(count(*) = 1, $3) FROM changed`,
		rideID, chargeID,
		fmt.Sprintf("record charge %s on ride %d: the ride has another charge or was settled without one", chargeID, rideID))
}

// settleRide queues moving the ride to status, a settlement without a
// charge (declined, failed, needs_review). Only a ride whose status can
// still change moves; otherwise the phase fails (see recordCharge).
func settleRide(tx *idem.Tx, rideID int64, status Status) {
	tx.Queue(`
		WITH changed AS (
			UPDATE rides SET status = $2
			WHERE id = $1::bigint AND status IN ('pending', 'needs_review')
			RETURNING 1
		)
		SELECT idempotency_key_phase_check(count(*) = 1, $3) FROM changed`,
		rideID, string(status), fmt.Sprintf("settle ride %d as %s: the ride is settled already", rideID, status))
}

// SettleReaped is what the reaper does, for rides, about the keys a batch
// deletes (an idem.ReapFunc): a ride whose request never finished and is
// now listed in abandoned_requests for a person stops saying pending,
// which promises that a retry or the completer will settle it, and says
// needs_review. It commits with the batch.
func SettleReaped(_ context.Context, tx *idem.Tx, reaped []idem.ReapedKey) error {
	var ids []int64
	for _, k := range reaped {
		if k.Abandoned() && k.RequestPath == Path && k.ResourceID != nil {
			ids = append(ids, *k.ResourceID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	tx.Queue(`
		UPDATE rides SET status = 'needs_review'
		WHERE id = ANY($1::bigint[]) AND status = 'pending'`, ids)
	return nil
}

func oneRide(ctx context.Context, q querier, what, sql string, args ...any) (*Ride, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("query ride %s: %w", what, err)
	}
	ride, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Ride])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("ride %s: %w", what, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read ride %s: %w", what, err)
	}
	return ride, nil
}

// flushOneRide queues a statement that returns one ride, flushes tx and
// returns the ride.
func flushOneRide(ctx context.Context, tx *idem.Tx, what, sql string, args ...any) (*Ride, error) {
	var ride *Ride
	tx.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		var err error
		ride, err = pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Ride])
		return err
	})
	err := tx.Flush(ctx)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("ride %s: %w", what, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("ride %s: %w", what, err)
	}
	return ride, nil
}
