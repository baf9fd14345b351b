// Second reading: the Store, its Config and their defaults, and the small
// helpers every file of the store shares: the log attributes of the key a
// request works, the lock token as a query argument, a key read back.

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
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

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
	}, nil
}

// LockTimeout is the age at which a lock counts as stale.
func (s *Store) LockTimeout() time.Duration { return s.lockTimeout }

var actorPattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,29}$`)

// annotate names key and its recovery point on every line logged with ctx
// from now on (see package logctx).
func annotate(ctx context.Context, key *Key) {
	logctx.Set(ctx, slog.Int64(logctx.IdempotencyKeyID, key.ID), slog.String(logctx.RecoveryPoint, string(key.RecoveryPoint)))
}

// newLockToken is a fresh fencing token.
func newLockToken() pgtype.UUID { return pgtype.UUID{Bytes: uuid.New(), Valid: true} }

// collectKey is the one key rows hold, or nil.
func collectKey(rows pgx.Rows) (*Key, error) {
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
