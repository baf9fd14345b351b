package ratelimit

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The charge cap counts in a sliding window, not in the fixed windows of
// the edge's limits: a fixed window lets a user whose quota is spent at
// the end of one window spend it again at the start of the next, twice
// the cap in a moment, and card testing is made of such moments.
//
// Each user's row in rate_limit_charges holds the charges of the last
// window in slots of a tenth of it (counts, newest first, eleven at most:
// the ten that the window spans and the one it has just begun). A charge
// counts until its slot is eleven tenths old, so for at least one whole
// window and at most a tenth more: no window of that length, wherever it
// starts, holds more than the quota. The state is eleven integers
// whatever the quota, so a high quota costs what a low one does.
//
// slots is the tenths of a window, as chargeSQL and retryAfterSQL write
// them out (10, 11 and 12 there are slots, slots+1 and slots+2).
const slots = 10

// chargeSQL counts one charge of the user $1 in its sliding window of $2
// seconds, given the quota $3: it moves the user's slots on to the one
// now() falls in, dropping those past eleven tenths, and adds the charge
// to the newest. Past the quota it fails the table's CHECK (hits <=
// quota) instead, and its transaction rolls back, the charge uncounted.
// A clock that stepped back (a failover) counts into the newest slot.
const chargeSQL = `
	INSERT INTO rate_limit_charges AS c (user_id, slot, counts, hits, quota, ends_at)
	SELECT $1, now_slot, '{1}', 1, $3, to_timestamp(((now_slot + 11) * $2::int / 10.0)::float8)
	FROM (SELECT floor(extract(epoch FROM now()) * 10 / $2::int)::bigint AS now_slot) AS t
	ON CONFLICT (user_id) DO UPDATE
	SET slot    = greatest(c.slot, excluded.slot),
	    counts  = CASE WHEN excluded.slot <= c.slot THEN (c.counts[1] + 1) || c.counts[2:]
	              ELSE 1 || array_fill(0, ARRAY[least(excluded.slot - c.slot, 11)::int - 1]) || c.counts[:11 - (excluded.slot - c.slot)] END,
	    hits    = CASE WHEN excluded.slot <= c.slot THEN c.hits + 1
	              ELSE 1 + (SELECT coalesce(sum(n), 0) FROM unnest(c.counts[:11 - (excluded.slot - c.slot)]) AS n) END,
	    quota   = excluded.quota,
	    ends_at = greatest(c.ends_at, excluded.ends_at)`

// retryAfterSQL is when the user $1's oldest counted charge leaves its
// window of $2 seconds, in seconds from now: the quota then has room for
// one more.
const retryAfterSQL = `
	SELECT ceil((c.slot - max(i) + 12) * $2::int / 10.0 - extract(epoch FROM now()))::int
	FROM rate_limit_charges AS c, generate_subscripts(c.counts, 1) AS i
	WHERE c.user_id = $1 AND c.counts[i] > 0
	GROUP BY c.slot`

// quotaCheck is the constraint a charge fails past the quota: the table's
// CHECK (hits <= quota), as Postgres names it.
const quotaCheck = "rate_limit_charges_check"

// ChargeGuard is the statement, and its arguments, that counts one charge
// of the user with userID under charges, and fails when the cap is
// reached (chargeSQL). The caller sends it ahead of the phase that
// creates the charge's ride, in the same round trip: the failure stops
// the phase, as a pipeline skips everything after an error, and rolls the
// count back.
func ChargeGuard(charges Policy, userID int64) (sql string, args []any) {
	return chargeSQL, []any{userID, charges.seconds(), int64(charges.Quota)}
}

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
// Retry-After is when the user's oldest counted charge leaves the window,
// or, should the read fail, the whole window and the tenth a charge may
// count beyond it.
func ChargeRefusal(ctx context.Context, q Querier, charges Policy, userID int64) *Exceeded {
	retryAfter := charges.seconds() + (charges.seconds()+slots-1)/slots
	if rows, err := q.Query(ctx, retryAfterSQL, userID, charges.seconds()); err == nil {
		if n, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[int]); err == nil {
			retryAfter = n
		}
	}
	return &Exceeded{Policy: charges, RetryAfter: max(retryAfter, 1)}
}
