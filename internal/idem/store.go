// Second reading: the Store, its Config and their defaults, and the small
// helpers every file of the store shares: the log attributes of the key a
// request works, the count of a claim's outcome, the lock token as a query
// argument, a key read back, a statement's answer handed to its callback,
// and the retries of a phase that Postgres aborted.

package idem

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/platform/logctx"
	"github.com/rocketrides/rocketrides/internal/platform/metrics"
)

// Store defaults.
const (
	// DefaultLockTimeout is how long a lock protects a key: past it the
	// request holding it is presumed dead and a retry may take over.
	DefaultLockTimeout = 90 * time.Second

	// DefaultPhaseAttempts is how often an atomic phase is tried when
	// Postgres aborts it for a serialization failure or deadlock.
	DefaultPhaseAttempts = 3

	// DefaultActor names the process in the steps it records.
	DefaultActor = "api"
)

// phaseTimeout bounds an atomic phase (Phase, PhaseThen), its retries
// included: a few statements in one transaction, milliseconds on an
// ordinary day. A phase whose connection has gone silent (a half-open
// link, a COMMIT whose answer never comes) would otherwise wait as long
// as its client does; cut off, its connection is closed and the request
// fails resumable.
const phaseTimeout = 10 * time.Second

// Config configures a Store. Pool is required; every other field has a
// default.
type Config struct {
	// Pool is the database holding idempotency_keys. Required.
	Pool *pgxpool.Pool
	// LockTimeout is how long a lock protects a key. Defaults to
	// DefaultLockTimeout.
	LockTimeout time.Duration
	// PhaseAttempts bounds how often a phase is tried when Postgres
	// aborts it for a serialization failure or deadlock. Defaults to
	// DefaultPhaseAttempts.
	PhaseAttempts int
	// Metrics records claim outcomes and phase durations; nil records
	// nothing.
	Metrics *metrics.Idempotency
	// Actor names the process in every step it records on a key (see
	// Step): "api", "completer", "console". Lowercase letters, digits,
	// '-' and '_', at most 30. Defaults to DefaultActor.
	Actor string
	// Logger receives what fails without failing the call that saw it (a
	// statement behind a phase's commit). Defaults to slog.Default().
	Logger *slog.Logger
	// Plain sends each statement of the claim and of every phase to
	// Postgres on its own, in the order claim.go and phase.go show them
	// (IDEMPOTENCY_PIPELINE=off). False, the default, takes the fast path:
	// the claim of a new or finished key in one statement (fastpath.go),
	// and each phase in one round trip (pipeline.go). Both decide the same.
	Plain bool
}

func (c *Config) validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("idem: Config.Pool is required")
	case c.LockTimeout < 0:
		return fmt.Errorf("idem: Config.LockTimeout must not be negative, got %s", c.LockTimeout)
	case c.PhaseAttempts < 0:
		return fmt.Errorf("idem: Config.PhaseAttempts must not be negative, got %d", c.PhaseAttempts)
	case c.Actor != "" && !actorPattern.MatchString(c.Actor):
		return fmt.Errorf("idem: Config.Actor must be lowercase letters, digits, '-' or '_' (at most 30), got %q", c.Actor)
	}
	return nil
}

// Store reads and writes idempotency keys.
type Store struct {
	pool          *pgxpool.Pool
	lockTimeout   time.Duration
	phaseAttempts int
	metrics       *metrics.Idempotency
	actor         string
	logger        *slog.Logger
	plain         bool
}

// New returns a Store for config.
func New(config *Config) (*Store, error) {
	if config == nil {
		return nil, errors.New("idem: Config is required (Pool)")
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	return &Store{
		pool:          config.Pool,
		lockTimeout:   cmp.Or(config.LockTimeout, DefaultLockTimeout),
		phaseAttempts: cmp.Or(config.PhaseAttempts, DefaultPhaseAttempts),
		metrics:       config.Metrics,
		actor:         cmp.Or(config.Actor, DefaultActor),
		logger:        cmp.Or(config.Logger, slog.Default()),
		plain:         config.Plain,
	}, nil
}

// LockTimeout is the age at which a lock counts as stale.
func (s *Store) LockTimeout() time.Duration { return s.lockTimeout }

// Plain reports whether the store takes the plain path (Config.Plain).
func (s *Store) Plain() bool { return s.plain }

var actorPattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,29}$`)

// annotate names key and its recovery point on every line logged with ctx
// from now on (see package logctx).
func annotate(ctx context.Context, key *Key) {
	logctx.Set(ctx, slog.Int64(logctx.IdempotencyKeyID, key.ID), slog.String(logctx.RecoveryPoint, string(key.RecoveryPoint)))
}

// count records a claim's outcome for the metrics: a claim that decided,
// taking the key or refusing the request, not one that failed on the way.
func (s *Store) count(outcome metrics.Outcome, err error) {
	if err == nil || errors.Is(err, ErrKeyReused) || errors.Is(err, ErrInFlight) || errors.Is(err, ErrKeyExpired) {
		s.metrics.Outcome(outcome)
	}
}

// retry makes attempts at a phase of key, from attempt on, until one
// succeeds or fails with what another attempt cannot mend; err is the
// previous attempt's. Postgres aborts a phase for a deadlock or a
// serialization failure, which a new attempt usually escapes. A key found
// at its first phase to have a reaped predecessor is retired. The
// attempts are one span (trace.go).
func (s *Store) retry(ctx context.Context, key *Key, once func(ctx context.Context, attempt int) error, attempt int, err error) (rerr error) {
	ctx, span := startPhase(ctx, key)
	from := key.RecoveryPoint
	defer func() { endPhase(ctx, span, key, from, "", rerr) }()
	for ; attempt <= s.phaseAttempts; attempt++ {
		err = once(ctx, attempt)
		if errors.Is(err, errReapedPredecessor) {
			return s.retire(ctx, key)
		}
		if err == nil || !db.IsRetryable(err) {
			return err
		}
	}
	return fmt.Errorf("phase at %s for key %d gave up after %d attempts: %w: %w",
		key.RecoveryPoint, key.ID, s.phaseAttempts, ErrContention, err)
}

// answer hands rows, the answer to q sent on its own, to the callback set
// on q (QueuedQuery.Query, QueryRow or Exec), as a pipeline would.
func answer(q *pgx.QueuedQuery, rows pgx.Rows) error {
	defer rows.Close()
	if q.Fn == nil {
		rows.Close()
		return rows.Err()
	}
	return q.Fn(result{rows})
}

// result is one statement's answer as pgx.BatchResults, for answer.
type result struct{ rows pgx.Rows }

func (r result) Query() (pgx.Rows, error) { return r.rows, r.rows.Err() }
func (r result) QueryRow() pgx.Row        { return firstRow(r) }
func (r result) Tx() pgx.Tx               { return nil }
func (r result) Close() error {
	r.rows.Close()
	return r.rows.Err()
}
func (r result) Exec() (pgconn.CommandTag, error) {
	r.rows.Close()
	return r.rows.CommandTag(), r.rows.Err()
}

// firstRow is a result read as pgx.Row: its first row.
type firstRow struct{ rows pgx.Rows }

func (r firstRow) Scan(dest ...any) error {
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// newLockToken is a fresh fencing token.
func newLockToken() pgtype.UUID { return pgtype.UUID{Bytes: uuid.New(), Valid: true} }

// collectKey is the one key rows hold, or nil; it takes a query's two
// results, so that the query's error and the rows' come out as one.
func collectKey(rows pgx.Rows, err error) (*Key, error) {
	if err != nil {
		return nil, err
	}
	keys, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByName[Key])
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, nil
	}
	return keys[0], nil
}

// lockToken is k's lock token as a query argument. pgtype.UUID is encoded
// straight to Postgres's binary format; uuid.UUID would go through its
// driver.Valuer as text and be parsed back, on every statement of every
// phase.
func (k *Key) lockToken() pgtype.UUID {
	if k.LockToken == nil {
		return pgtype.UUID{}
	}
	return pgtype.UUID{Bytes: *k.LockToken, Valid: true}
}
