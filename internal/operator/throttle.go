package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The two counts a login attempt is taken from.
const (
	scopeAddress = "address"
	scopeAccount = "account"
)

// take counts one login attempt at subject, or refuses it with a
// ThrottledError while subject must wait. The attempt counts as a failure
// from the start, and giveBack returns it once the password proves right:
// a hundred guesses sent at once meet the count one at a time, under the
// row's lock, and only the free ones get through. Counts a while past
// their last wait are forgotten first, so that the table keeps only the
// recent ones.
//
// The first FreeFailures attempts in a row go through at once; after that
// each waits FirstWait, doubled with every further failure, up to
// MaxWait.
func (s *Store) take(ctx context.Context, scope, subject string) error {
	t := s.throttle
	args := pgx.NamedArgs{
		"scope": scope, "subject": subject, "free": t.FreeFailures,
		"first_wait": t.FirstWait.Seconds(), "max_wait": t.MaxWait.Seconds(), "forget": t.ForgetAfter.Seconds(),
	}
	if _, err := s.pool.Exec(ctx, `
		DELETE FROM operator_login_failures
		WHERE wait_until < clock_timestamp() - make_interval(secs => @forget::float8)`, args); err != nil {
		return fmt.Errorf("forget old login failures: %w", err)
	}
	// clock_timestamp(), not now(): an attempt that waited for another's
	// row lock is judged at the time it got it.
	rows, err := s.pool.Query(ctx, `
		INSERT INTO operator_login_failures AS f (scope, subject, failures, wait_until)
		VALUES (@scope, @subject, 1, clock_timestamp() + make_interval(secs =>
			CASE WHEN 1 < @free::int THEN 0 ELSE @first_wait::float8 END))
		ON CONFLICT (scope, subject) DO UPDATE
		SET failures   = f.failures + 1,
		    wait_until = clock_timestamp() + make_interval(secs =>
		        CASE WHEN f.failures + 1 < @free::int THEN 0
		        ELSE least(@first_wait::float8 * 2 ^ least(f.failures + 1 - @free::int, 30), @max_wait::float8) END)
		WHERE f.wait_until <= clock_timestamp()
		RETURNING failures`, args)
	if err != nil {
		return fmt.Errorf("count a login attempt (%s): %w", scope, err)
	}
	_, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[int])
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("count a login attempt (%s): %w", scope, err)
	}
	// Refused: the row is waiting. How long, for Retry-After; a moment
	// should the row have gone since.
	var wait float64
	err = s.pool.QueryRow(ctx, `
		SELECT coalesce(max(extract(epoch FROM wait_until - clock_timestamp())), 0)::float8
		FROM operator_login_failures WHERE scope = $1 AND subject = $2`, scope, subject).Scan(&wait)
	if err != nil {
		return fmt.Errorf("read a login wait (%s): %w", scope, err)
	}
	return &ThrottledError{Scope: scope, RetryAfter: max(time.Duration(wait*float64(time.Second)), time.Millisecond)}
}

// giveBack returns an attempt that proved right: the account's count
// starts again, since its owner is here, while the address only gets its
// one attempt back, so that logging in to an account of one's own does
// not clear the guesses one made at others. The wait the attempt set
// goes too when the count is back among the free ones; above them it
// stays, so that a guesser's own logins never shorten a wait.
func (s *Store) giveBack(ctx context.Context, name, address string) error {
	_, err := s.pool.Exec(ctx, `
		WITH account AS (
			DELETE FROM operator_login_failures WHERE scope = 'account' AND subject = @name
		)
		UPDATE operator_login_failures
		SET failures   = failures - 1,
		    wait_until = CASE WHEN failures - 1 < @free::int THEN least(wait_until, clock_timestamp()) ELSE wait_until END
		WHERE scope = 'address' AND subject = @address AND failures > 0`,
		pgx.NamedArgs{"name": name, "address": address, "free": s.throttle.FreeFailures})
	if err != nil {
		return fmt.Errorf("give back a login attempt: %w", err)
	}
	return nil
}
