package migrations_test

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers pgx5://
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/migrations"
)

// update rewrites the golden schema instead of comparing with it:
//
//	go test ./migrations -run TestSchema -update
var update = flag.Bool("update", false, "rewrite testdata/schema.sql from the migrated schema")

// golden is the schema as pg_dump --schema-only prints it (normalised, see
// normalise). It was first written from the eight migrations that were
// squashed into 000001_schema, so it shows the squash changed nothing; from
// then on it is the schema's drift check: a change to the schema shows up
// in review as a change to this file.
const golden = "testdata/schema.sql"

func TestSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("MatchesTestdata", func(t *testing.T) {
		t.Parallel()
		got := normalise(pgDump(t, projectSchemaOnly(t)))
		if *update {
			require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
			return
		}
		want, err := os.ReadFile(golden)
		require.NoError(t, err)
		if got != string(want) {
			t.Fatalf("the migrated schema differs from %s (- there, + migrated):\n%s\n"+
				"If the change is meant, rewrite the file with -update and commit it.", golden, lineDiff(string(want), got))
		}
	})

	// A new key's Stripe idempotency key comes from the client's request
	// (rides.StripeKey); an identity would send it down the older scheme,
	// kept for keys that have one.
	t.Run("GivesNewKeysNoIdentity", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.New(t)
		_, err := pool.Exec(ctx, `INSERT INTO users (id, email, stripe_customer_id, api_token_hash)
		                         VALUES (1, 'user@example.com', 'cus_1', sha256('token'))`)
		require.NoError(t, err)
		var identity *string
		require.NoError(t, pool.QueryRow(ctx, `
			INSERT INTO idempotency_keys (idempotency_key, request_method, request_params, request_path, origin_ip, user_id, recovery_point, locked_at)
			VALUES ('new', 'POST', '{}', '/rides', '127.0.0.1', 1, 'started', NULL)
			RETURNING identity::text`).Scan(&identity))
		require.Nil(t, identity)
	})
}

// projectSchemaOnly returns the URL of a database that holds the
// project's schema and nothing else: River's tables are left out, so that
// upgrading River does not change the golden file.
func projectSchemaOnly(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	url := dbtest.NewURL(t)
	// The clone holds the project's schema and River's; take both down,
	// then bring up only the project's.
	require.NoError(t, db.MigrateDown(ctx, url, slog.New(slog.DiscardHandler)))
	src, err := iofs.New(migrations.FS, ".")
	require.NoError(t, err)
	m, err := migrate.NewWithSourceInstance("iofs", src, "pgx5://"+strings.TrimPrefix(url, "postgres://"))
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, m.Up())

	// Nothing of River's may remain, or the golden file would hold it.
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	var river int
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM pg_class WHERE relname LIKE 'river%')
		     + (SELECT count(*) FROM pg_proc WHERE proname LIKE 'river%')
		     + (SELECT count(*) FROM pg_type WHERE typname LIKE 'river%')`).Scan(&river))
	require.Zero(t, river, "River's schema is still there after its migrations went down")
	return url
}

// pgDump returns pg_dump --schema-only of the database at url, without
// owners or grants (they name the role the tests happen to run as).
func pgDump(t *testing.T, url string) string {
	t.Helper()
	bin := "pg_dump"
	// The project-local cluster's own binaries first: pg_dump refuses a
	// server newer than itself, and PATH may hold an older one.
	if c, err := localpg.New(localpg.Options{}); err == nil {
		if p := filepath.Join(c.BinDir, "pg_dump"); fileExists(p) {
			bin = p
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "--schema-only", "--no-owner", "--no-privileges", "--dbname", url)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, stderr.String())
	}
	return stdout.String()
}

func fileExists(path string) bool {
	info, err := os.Stat(path)
	return err == nil && !info.IsDir()
}

// lineDiff lists the lines only want has (-) and the lines only got has
// (+); a schema's lines are nearly all distinct, so this is enough to see
// a change. Lines that only moved (a column reordered) show no difference
// line by line, and are reported as such.
func lineDiff(want, got string) string {
	count := map[string]int{}
	for line := range strings.Lines(got) {
		count[line]++
	}
	var b strings.Builder
	for line := range strings.Lines(want) {
		if count[line] > 0 {
			count[line]--
			continue
		}
		b.WriteString("-" + line)
	}
	for line := range strings.Lines(got) {
		if count[line] > 0 {
			count[line]--
			b.WriteString("+" + line)
		}
	}
	if b.Len() == 0 {
		return "the same lines, in another order"
	}
	return b.String()
}

// normalise drops from a dump what varies with pg_dump's version rather
// than with the schema: comment lines (the header names the versions),
// the session settings the dump starts with (SET ..., and the search_path
// it clears with set_config), and the \restrict and \unrestrict lines of
// newer releases, which carry a random key. Runs of blank lines left
// behind become one.
func normalise(dump string) string {
	var b strings.Builder
	blank := true // no blank lines at the start
	for line := range strings.Lines(dump) {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "--"),
			strings.HasPrefix(trimmed, "SET "),
			strings.HasPrefix(trimmed, "SELECT pg_catalog.set_config("),
			strings.HasPrefix(trimmed, `\restrict`),
			strings.HasPrefix(trimmed, `\unrestrict`):
			continue
		case trimmed == "":
			if blank {
				continue
			}
			blank = true
		default:
			blank = false
		}
		b.WriteString(strings.TrimRight(line, " \t\n") + "\n")
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}
