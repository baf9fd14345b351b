package db_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
)

func TestOpen(t *testing.T) {
	t.Parallel()

	// pgx quotes a string it refuses with the password masked as well as
	// it can guess: here it used to leave "x'" of "it\'s x".
	t.Run("MasksThePasswordOfAStringPgxRefuses", func(t *testing.T) {
		t.Parallel()
		for _, url := range []string{
			`host=db password='it\'s hunter2' sslmode=bogus`,
			`postgres://rr:hunter2@db/rides?sslmode=bogus`,
			`host=db password='hun ter2`,
		} {
			_, err := db.Open(context.Background(), url, 1)
			require.ErrorContains(t, err, "DATABASE_URL=", url)
			require.NotContains(t, err.Error(), "hunter2", url)
			require.NotContains(t, err.Error(), "ter2", url)
		}
	})
}

func TestMigrate(t *testing.T) {
	t.Parallel()

	tables := func(t *testing.T, url string) int {
		t.Helper()
		pool, err := db.Open(context.Background(), url, 1)
		require.NoError(t, err)
		defer pool.Close()
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), `
			SELECT count(*) FROM information_schema.tables
			WHERE table_schema = current_schema()
			  AND table_name IN ('users', 'idempotency_keys', 'rides', 'audit_records', 'staged_jobs', 'river_job')`,
		).Scan(&n))
		return n
	}

	t.Run("DownRemovesEverythingAndUpRestoresIt", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		url := dbtest.NewURL(t)
		logger := slog.New(slog.DiscardHandler)

		version, dirty, river, err := db.Version(ctx, url, logger)
		require.NoError(t, err)
		require.False(t, dirty)
		require.NotZero(t, version)
		require.NotEmpty(t, river)
		require.Equal(t, 6, tables(t, url))

		require.NoError(t, db.MigrateDown(ctx, url, logger))
		require.Equal(t, 0, tables(t, url))
		version, _, river, err = db.Version(ctx, url, logger)
		require.NoError(t, err)
		require.Zero(t, version)
		require.Empty(t, river)

		require.NoError(t, db.MigrateUp(ctx, url, logger))
		require.Equal(t, 6, tables(t, url))
		require.NoError(t, db.MigrateUp(ctx, url, logger), "up is idempotent")
	})

	// A database built before the migrations were squashed carries a
	// version no file has; the error says how to reset it.
	t.Run("UpNamesTheResetForAVersionItHasNoFileFor", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		url := dbtest.NewURL(t)
		pool, err := db.Open(ctx, url, 1)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `UPDATE schema_migrations SET version = 8`)
		pool.Close()
		require.NoError(t, err)

		err = db.MigrateUp(ctx, url, slog.New(slog.DiscardHandler))
		require.ErrorContains(t, err, "no migration found for version 8")
		require.ErrorContains(t, err, "make clean")
	})
}
