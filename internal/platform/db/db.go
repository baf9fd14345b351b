// Package db connects to Postgres and brings its schema up or down: the
// project's own migrations (migrations/) followed by the schema of River,
// the job queue that shares the database.
package db

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"time"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers pgx5://
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/trace"
	"github.com/rocketrides/rocketrides/migrations"
)

// Open returns a connection pool for url, the value of DATABASE_URL,
// which an error about url names. maxConns of zero keeps pgx's default
// (the larger of 4 and the number of CPUs).
func Open(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, parseError(url, err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	// A broken connection (the server restarted) is noticed by the next
	// health check and replaced, so the pool heals without a restart.
	cfg.HealthCheckPeriod = 5 * time.Second
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	cfg.ConnConfig.Tracer = trace.PgxTracer() // nil unless the process traces
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	return pool, nil
}

// parseError is pgx's refusal of url, quoting url as the start line shows
// it rather than as pgx does: pgx masks the password of a string it could
// not read only as well as it can guess (host=db password='it\'s x'
// sslmode=bogus comes back as password=xxxxx x'), and the config
// package's masking is the one the project tests, shape by shape.
func parseError(url string, err error) error {
	why := err.Error()
	var parseErr *pgconn.ParseConfigError
	if errors.As(err, &parseErr) {
		// "cannot parse `<url>`: <why>": keep only why.
		if i := strings.LastIndex(why, "`: "); i >= 0 {
			why = why[i+len("`: "):]
		}
	}
	shown := config.Setting{Name: "DATABASE_URL", Type: config.TypeConnString}.Show(url)
	return fmt.Errorf("DATABASE_URL=%s: pgx cannot use it: %s", shown, why)
}

// MigrateUp applies every pending migration: the project's schema, then
// River's.
func MigrateUp(ctx context.Context, url string, logger *slog.Logger) error {
	m, err := newMigrate(url)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		if errors.Is(err, fs.ErrNotExist) {
			// Until the first release the schema is edited in place (see
			// package migrations), so a dev database built before a squash
			// carries a version this build has no file for.
			return fmt.Errorf("migrate project schema up: %w; the database was built from an earlier schema: reset a dev database with make clean", err)
		}
		return fmt.Errorf("migrate project schema up: %w", err)
	}
	return withRiverMigrator(ctx, url, logger, func(rm *rivermigrate.Migrator[pgxTx]) error {
		if _, err := rm.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			return fmt.Errorf("migrate river schema up: %w", err)
		}
		return nil
	})
}

// MigrateDown removes everything MigrateUp created, River's schema first.
func MigrateDown(ctx context.Context, url string, logger *slog.Logger) error {
	err := withRiverMigrator(ctx, url, logger, func(rm *rivermigrate.Migrator[pgxTx]) error {
		if _, err := rm.Migrate(ctx, rivermigrate.DirectionDown, &rivermigrate.MigrateOpts{TargetVersion: -1}); err != nil {
			return fmt.Errorf("migrate river schema down: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	m, err := newMigrate(url)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.Down(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate project schema down: %w", err)
	}
	return nil
}

// Version reports the project's schema version, whether a migration
// failed half way (dirty), and the River schema versions applied.
func Version(ctx context.Context, url string, logger *slog.Logger) (version uint, dirty bool, river []int, err error) {
	m, err := newMigrate(url)
	if err != nil {
		return 0, false, nil, err
	}
	defer m.Close()
	version, dirty, err = m.Version()
	if err != nil && !errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil, fmt.Errorf("read project schema version: %w", err)
	}
	err = withRiverMigrator(ctx, url, logger, func(rm *rivermigrate.Migrator[pgxTx]) error {
		existing, err := rm.ExistingVersions(ctx)
		if err != nil {
			return fmt.Errorf("read river schema versions: %w", err)
		}
		for _, v := range existing {
			river = append(river, v.Version)
		}
		return nil
	})
	return version, dirty, river, err
}

func newMigrate(url string) (*migrate.Migrate, error) {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return nil, fmt.Errorf("open embedded migrations: %w", err)
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, migrateURL(url))
	if err != nil {
		return nil, fmt.Errorf("connect migrate to database: %w", err)
	}
	return m, nil
}

// migrateURL turns a postgres:// URL into the pgx5:// scheme that
// golang-migrate's pgx/v5 driver registers under.
func migrateURL(url string) string {
	for _, prefix := range []string{"postgres://", "postgresql://"} {
		if rest, ok := strings.CutPrefix(url, prefix); ok {
			return "pgx5://" + rest
		}
	}
	return url
}

type pgxTx = pgx.Tx

func withRiverMigrator(ctx context.Context, url string, logger *slog.Logger, fn func(*rivermigrate.Migrator[pgxTx]) error) error {
	pool, err := Open(ctx, url, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	rm, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("create river migrator: %w", err)
	}
	return fn(rm)
}

// IsRetryable reports whether err is a serialization failure or a
// deadlock: Postgres aborted the transaction because of a concurrent one,
// and running it again is expected to succeed.
func IsRetryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "40001" || pgErr.Code == "40P01"
	}
	return false
}
