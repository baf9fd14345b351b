package ratelimit

import (
	"context"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// quotaCheck is the constraint a hit given a quota fails past it: the
// table's CHECK (hits <= quota), as Postgres names it.
const quotaCheck = "rate_limit_windows_check"

// ChargeGuard is the statement, and its arguments, that counts one charge
// of the user with userID under charges, and fails when the cap is
// reached (hitSQL, given the quota). The caller sends it ahead of the
// phase that creates the charge's ride, in the same round trip: the
// failure stops the phase, as a pipeline skips everything after an
// error, and rolls the count back.
func ChargeGuard(charges Policy, userID int64) (sql string, args []any) {
	return hitSQL, []any{charges.Name, chargeSubject(userID), charges.seconds(), int64(charges.Quota), 1}
}

// chargeSubject is what the charge cap counts for: the user.
func chargeSubject(userID int64) string { return strconv.FormatInt(userID, 10) }

// Refused reports whether err, a failure of the statements sent with a
// ChargeGuard, is the charge cap's refusal.
func Refused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23514" && pgErr.ConstraintName == quotaCheck
}

// Querier is what ChargeRefusal needs of a pool or a connection.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ChargeRefusal is the refusal of a charge the cap refused (Refused):
// Retry-After is read from the user's window, or, should the read fail,
// is the whole window.
func ChargeRefusal(ctx context.Context, q Querier, charges Policy, userID int64) *Exceeded {
	retryAfter := charges.seconds()
	if rows, err := q.Query(ctx, readSQL, charges.Name, chargeSubject(userID)); err == nil {
		if w, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[window]); err == nil {
			retryAfter = w.RetryAfter
		}
	}
	return &Exceeded{Policy: charges, RetryAfter: max(retryAfter, 1)}
}
