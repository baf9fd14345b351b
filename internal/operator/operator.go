// Package operator owns the console's accounts: one per person
// (operators), the password kept only as its argon2id hash; the sessions
// of those logged in, kept on the server so that logging out, disabling
// the account or resetting its password ends them (operator_sessions);
// and the count of logins not yet proved right, which makes each further
// guess at an account, or from an address, wait longer
// (operator_login_failures).
//
// cmd/console manages the accounts (`console operator add|disable`);
// package console logs people in through Store.Login and finds their
// session on every request through Store.Session. There is no default
// account: make dev creates its own with the same command.
package operator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketrides/rocketrides/internal/rides"
)

// Defaults of Config's zero fields.
const (
	// DefaultSessionLifetime is how long a login lasts, a working day.
	DefaultSessionLifetime = 12 * time.Hour
	// DefaultFreeFailures is how many logins at one account, or from one
	// address, may fail in a row before each further one waits: enough
	// for a person's typos.
	DefaultFreeFailures = 5
	// DefaultFirstWait is the wait after the free failures; it doubles
	// with each further failure.
	DefaultFirstWait = time.Second
	// DefaultMaxWait caps the wait: a guesser gets about four tries an
	// hour, and a person locked out by someone else's guessing waits at
	// most this long.
	DefaultMaxWait = 15 * time.Minute
	// DefaultForgetAfter is how long after its last wait ended a count is
	// forgotten, and the next attempt free again.
	DefaultForgetAfter = time.Hour
)

// Config configures a Store.
type Config struct {
	// Pool is the Rocket Rides database. Required.
	Pool *pgxpool.Pool
	// SessionLifetime defaults to DefaultSessionLifetime.
	SessionLifetime time.Duration
	// Throttle's zero fields take their defaults.
	Throttle Throttle
}

// Throttle is how failed logins slow the next ones down, counted per
// account name and per client address (an IPv6 address by its /64).
type Throttle struct {
	// FreeFailures defaults to DefaultFreeFailures.
	FreeFailures int
	// FirstWait defaults to DefaultFirstWait.
	FirstWait time.Duration
	// MaxWait defaults to DefaultMaxWait.
	MaxWait time.Duration
	// ForgetAfter defaults to DefaultForgetAfter; at least MaxWait.
	ForgetAfter time.Duration
}

func (c *Config) validate() error {
	t := c.Throttle
	switch {
	case c.Pool == nil:
		return errors.New("operator: Config.Pool is required")
	case c.SessionLifetime < 0:
		return errors.New("operator: Config.SessionLifetime must not be negative")
	case t.FreeFailures < 0, t.FirstWait < 0, t.MaxWait < 0, t.ForgetAfter < 0:
		return errors.New("operator: Config.Throttle's fields must not be negative")
	}
	return nil
}

// Store is the accounts, their sessions and the count of failed logins.
type Store struct {
	pool     *pgxpool.Pool
	lifetime time.Duration
	throttle Throttle
	// hashing bounds the argon2id hashes computed at once: each takes
	// 19 MiB, and a flood of logins must not take the console's memory.
	hashing chan struct{}
	// absent is a hash that a login for a name without an account is
	// checked against, so that it takes as long as a wrong password: the
	// answer's time does not tell which names have accounts.
	absent string
}

// New returns the Store for config.
func New(config *Config) (*Store, error) {
	if config == nil {
		return nil, errors.New("operator: Config is required")
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	t := config.Throttle
	t.FreeFailures = cmp.Or(t.FreeFailures, DefaultFreeFailures)
	t.FirstWait = cmp.Or(t.FirstWait, DefaultFirstWait)
	t.MaxWait = cmp.Or(t.MaxWait, DefaultMaxWait)
	t.ForgetAfter = cmp.Or(t.ForgetAfter, DefaultForgetAfter)
	if t.ForgetAfter < t.MaxWait {
		return nil, fmt.Errorf("operator: Config.Throttle.ForgetAfter (%s) is shorter than its MaxWait (%s)", t.ForgetAfter, t.MaxWait)
	}
	return &Store{
		pool:     config.Pool,
		lifetime: cmp.Or(config.SessionLifetime, DefaultSessionLifetime),
		throttle: t,
		hashing:  make(chan struct{}, runtime.GOMAXPROCS(0)),
		absent:   hashPassword("no account has this password"),
	}, nil
}

// Operator is a person's account.
type Operator struct {
	ID   int64  `db:"id"`
	Name string `db:"name"`
}

// Errors of the accounts.
var (
	// ErrExists: Add was given the name of an account that exists.
	ErrExists = errors.New("an account of that name exists")
	// ErrNotFound: no account has the name, or none that is enabled.
	ErrNotFound = errors.New("no such account")
)

// NameError is CheckName's refusal: Reason says why.
type NameError struct{ Reason string }

func (e *NameError) Error() string { return "account name refused: " + e.Reason }

// CheckName refuses an account name that an audit record would refuse
// (rides.ValidOperator: every settlement's record names the account), or
// one with spaces at its ends, which the login form trims.
func CheckName(name string) error {
	var refused *rides.OperatorError
	switch {
	case errors.As(rides.ValidOperator(name), &refused):
		return &NameError{refused.Reason}
	case name != strings.TrimSpace(name):
		return &NameError{"the operator's name begins or ends with a space"}
	}
	return nil
}

// check refuses a name or a password, by name, before anything is hashed.
func check(name, password string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	return CheckPassword(name, password)
}

// Add creates the account name with password, or refuses it: a bad name
// (NameError), a weak password (PasswordError), or ErrExists.
func (s *Store) Add(ctx context.Context, name, password string) (Operator, error) {
	if err := check(name, password); err != nil {
		return Operator{}, err
	}
	hash, err := s.hash(ctx, password)
	if err != nil {
		return Operator{}, err
	}
	rows, err := s.pool.Query(ctx, `
		INSERT INTO operators (name, password_hash) VALUES ($1, $2)
		ON CONFLICT (name) DO NOTHING
		RETURNING id, name`, name, hash)
	return oneOperator(rows, err, "add", name, ErrExists)
}

// Reset sets the password of the account name, creating it if there is
// none, and enables it; the account's sessions end in the same statement,
// as a password reset after a leak must. make dev uses it to have its
// account whatever the database held.
func (s *Store) Reset(ctx context.Context, name, password string) (Operator, error) {
	if err := check(name, password); err != nil {
		return Operator{}, err
	}
	hash, err := s.hash(ctx, password)
	if err != nil {
		return Operator{}, err
	}
	rows, err := s.pool.Query(ctx, `
		WITH account AS (
			INSERT INTO operators (name, password_hash) VALUES ($1, $2)
			ON CONFLICT (name) DO UPDATE
			SET password_hash = excluded.password_hash, password_set_at = now(), disabled_at = NULL
			RETURNING id, name
		), ended AS (
			DELETE FROM operator_sessions WHERE operator_id IN (SELECT id FROM account)
		)
		SELECT id, name FROM account`, name, hash)
	return oneOperator(rows, err, "reset", name, nil)
}

// Disabled is what Disable did.
type Disabled struct {
	Operator Operator
	// Since is when the account was disabled: now, or earlier when it
	// already was.
	Since time.Time
	// SessionsEnded is how many of its sessions ended.
	SessionsEnded int
}

// Disable disables the account name, and ends its sessions in the same
// statement: whoever is logged in as it is logged out at their next
// request. Disabling a disabled account changes nothing. The account
// stays, for the audit records that name it.
func (s *Store) Disable(ctx context.Context, name string) (Disabled, error) {
	var d Disabled
	err := s.pool.QueryRow(ctx, `
		WITH account AS (
			UPDATE operators SET disabled_at = coalesce(disabled_at, now())
			WHERE name = $1
			RETURNING id, name, disabled_at
		), ended AS (
			DELETE FROM operator_sessions WHERE operator_id IN (SELECT id FROM account)
			RETURNING 1
		)
		SELECT id, name, disabled_at, (SELECT count(*) FROM ended) FROM account`, name).
		Scan(&d.Operator.ID, &d.Operator.Name, &d.Since, &d.SessionsEnded)
	if errors.Is(err, pgx.ErrNoRows) {
		return Disabled{}, fmt.Errorf("disable account %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return Disabled{}, fmt.Errorf("disable account %q: %w", name, err)
	}
	return d, nil
}

// Enabled returns the enabled account name, or ErrNotFound.
func (s *Store) Enabled(ctx context.Context, name string) (Operator, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, name FROM operators WHERE name = $1 AND disabled_at IS NULL`, name)
	return oneOperator(rows, err, "find", name, ErrNotFound)
}

// CountEnabled is how many accounts can log in.
func (s *Store) CountEnabled(ctx context.Context) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM operators WHERE disabled_at IS NULL`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count accounts: %w", err)
	}
	return n, nil
}

// oneOperator reads the one account rows holds; none is errNone.
func oneOperator(rows pgx.Rows, err error, what, name string, errNone error) (Operator, error) {
	if err != nil {
		return Operator{}, fmt.Errorf("%s account %q: %w", what, name, err)
	}
	o, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Operator])
	if errors.Is(err, pgx.ErrNoRows) && errNone != nil {
		return Operator{}, fmt.Errorf("%s account %q: %w", what, name, errNone)
	}
	if err != nil {
		return Operator{}, fmt.Errorf("%s account %q: %w", what, name, err)
	}
	return o, nil
}

// hash is hashPassword, waiting its turn (Store.hashing).
func (s *Store) hash(ctx context.Context, password string) (string, error) {
	if err := s.acquire(ctx); err != nil {
		return "", err
	}
	defer s.release()
	return hashPassword(password), nil
}

// verify is verifyPassword, waiting its turn (Store.hashing).
func (s *Store) verify(ctx context.Context, encoded, password string) (bool, error) {
	if err := s.acquire(ctx); err != nil {
		return false, err
	}
	defer s.release()
	return verifyPassword(encoded, password)
}

func (s *Store) acquire(ctx context.Context) error {
	select {
	case s.hashing <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Store) release() { <-s.hashing }
