// Package dbtest gives each test a database of its own, cloned from a
// template that already holds the migrated schema (the project's and
// River's). Tests therefore run in parallel against real Postgres without
// seeing each other's rows, and the migrations run once per schema
// version, not once per test.
//
// The server is $TEST_DATABASE_URL when set (its role needs CREATEDB; the
// database it names is only used to connect), otherwise the project-local
// cluster of internal/dev/localpg, started if needed.
package dbtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/migrations"
)

const (
	// namePrefix marks the databases this package creates, so that ones
	// left behind by a killed test binary are easy to find and drop.
	namePrefix = "rr_test_"

	// maxIdentifier is Postgres's limit on a database name (NAMEDATALEN-1);
	// longer names are silently truncated, which could make two unique
	// names collide.
	maxIdentifier = 63

	// setupTimeout covers the first call in a binary: possibly initdb and
	// the server start, then the migrations of the template.
	setupTimeout = 2 * time.Minute
)

// New returns a pool on a fresh database cloned from the migrated template,
// dropped when the test ends.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dbURL := NewURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := db.Open(ctx, dbURL, 0)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	// Registered after NewURL's cleanup, so it runs first: the pool is
	// closed before its database is dropped.
	t.Cleanup(pool.Close)
	return pool
}

// NewURL returns the URL of a fresh database cloned from the migrated
// template, for tests that start real processes; it is dropped when the
// test ends.
func NewURL(t testing.TB) string {
	t.Helper()
	srv, err := getServer()
	if err != nil {
		t.Fatalf("dbtest: prepare test database server: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), databaseTimeout)
	defer cancel()
	name, err := srv.createDatabase(ctx, t.Name())
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() {
		// The test's context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), databaseTimeout)
		defer cancel()
		if err := srv.dropDatabase(ctx, name); err != nil {
			t.Errorf("dbtest: %v", err)
		}
	})
	return srv.databaseURL(name)
}

// databaseTimeout bounds creating or dropping one test database. It is a
// guard against a hung server, not a measure: every DROP DATABASE waits
// for an immediate checkpoint, and when many parallel tests end at once
// on a machine whose cores are busy, the drops queue behind each other's
// checkpoints. 30 s was outrun that way in a fresh-clone run beside two
// busy loops.
const databaseTimeout = 3 * time.Minute

// server is the Postgres server test databases are created on, prepared
// once per test binary.
type server struct {
	admin    *pgxpool.Pool // connected to the server's given database
	base     *url.URL      // the server's URL; only the path changes
	template string
}

var (
	serverOnce sync.Once
	serverVal  *server
	serverErr  error
)

func getServer() (*server, error) {
	serverOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		serverVal, serverErr = newServer(ctx)
	})
	return serverVal, serverErr
}

func newServer(ctx context.Context) (*server, error) {
	var env config.Env
	serverURL := env.String("TEST_DATABASE_URL", "")
	if err := env.Err(); err != nil {
		return nil, err
	}
	if serverURL == "" {
		c, err := localpg.Ensure(ctx, localpg.Options{})
		if err != nil {
			return nil, fmt.Errorf("start local postgres (or set TEST_DATABASE_URL): %w", err)
		}
		serverURL = c.URL()
	}
	base, err := url.Parse(serverURL)
	if err != nil || (base.Scheme != "postgres" && base.Scheme != "postgresql") {
		// A URL, not a keyword/value string: the test databases' URLs are
		// derived from it, and golang-migrate only takes URLs.
		return nil, fmt.Errorf("TEST_DATABASE_URL must be a postgres:// URL")
	}
	admin, err := db.Open(ctx, serverURL, 0)
	if err != nil {
		return nil, err
	}
	srv := &server{admin: admin, base: base, template: templateName()}
	if err := srv.ensureTemplate(ctx); err != nil {
		admin.Close()
		return nil, err
	}
	return srv, nil
}

func (s *server) databaseURL(name string) string {
	u := *s.base
	u.Path = "/" + name
	u.RawPath = ""
	return u.String()
}

// templateName names the template after a hash of everything that shapes
// the schema, the project's migrations and River's, so a changed
// migration gets a new template instead of tests running on a stale one.
func templateName() string {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		content, err := fs.ReadFile(migrations.FS, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(content))
		h.Write(content)
		return nil
	})
	if err != nil {
		// The files are embedded in the binary: unreadable means a broken
		// build, not a condition to handle.
		panic(fmt.Sprintf("hash embedded migrations: %v", err))
	}
	// River's migrations ship inside its module, so upgrading River
	// changes the schema too. A nil pool is enough to list them.
	rm, err := rivermigrate.New(riverpgxv5.New(nil), &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(fmt.Sprintf("list river migrations: %v", err))
	}
	h.Write([]byte("river\x00"))
	for _, m := range rm.AllVersions() {
		fmt.Fprintf(h, "%d\x00%d\x00", m.Version, len(m.SQLUp))
		h.Write([]byte(m.SQLUp))
	}
	return "rocketrides_tpl_" + hex.EncodeToString(h.Sum(nil))[:8]
}

// ensureTemplate creates and migrates the template unless a finished one
// exists. Test binaries run concurrently, so they take turns on an
// advisory lock: unlike a file lock it also works when TEST_DATABASE_URL
// points at another machine.
func (s *server) ensureTemplate(ctx context.Context) error {
	// A connection of its own, closed at the end: an advisory lock belongs
	// to its session, and closing the session releases it whatever happens.
	conn, err := pgx.ConnectConfig(ctx, s.admin.Config().ConnConfig)
	if err != nil {
		return fmt.Errorf("connect to create template: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	sum := sha256.Sum256([]byte(s.template))
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(binary.BigEndian.Uint64(sum[:8]))); err != nil {
		return fmt.Errorf("lock template %s: %w", s.template, err)
	}

	tpl := pgx.Identifier{s.template}.Sanitize()
	var isTemplate bool
	err = conn.QueryRow(ctx, "SELECT datistemplate FROM pg_database WHERE datname = $1", s.template).Scan(&isTemplate)
	switch {
	case err == nil && isTemplate:
		return nil // finished by an earlier or concurrent test binary
	case err == nil:
		// Exists but was never marked: its creator died mid-migration.
		if _, err := conn.Exec(ctx, "DROP DATABASE "+tpl+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop unfinished template %s: %w", s.template, err)
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("look up template %s: %w", s.template, err)
	}

	if _, err := conn.Exec(ctx, "CREATE DATABASE "+tpl); err != nil {
		return fmt.Errorf("create template %s: %w", s.template, err)
	}
	if err := db.MigrateUp(ctx, s.databaseURL(s.template), slog.New(slog.DiscardHandler)); err != nil {
		return fmt.Errorf("migrate template %s: %w", s.template, err)
	}
	// CREATE DATABASE ... TEMPLATE fails while anyone is connected to the
	// template. The migrators have closed their connections, but a backend
	// may still be exiting; make sure, then forbid new connections.
	if _, err := conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", s.template); err != nil {
		return fmt.Errorf("disconnect from template %s: %w", s.template, err)
	}
	// The mark comes last: only a fully migrated template is ever marked,
	// so an unmarked one is known to be broken.
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+tpl+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
		return fmt.Errorf("mark template %s: %w", s.template, err)
	}
	return nil
}

// createDatabase clones the template into a new database named after the
// test and returns its name.
func (s *server) createDatabase(ctx context.Context, testName string) (string, error) {
	name, err := uniqueName(testName)
	if err != nil {
		return "", err
	}
	query := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE " + pgx.Identifier{s.template}.Sanitize()
	for attempt := 1; ; attempt++ {
		_, err := s.admin.Exec(ctx, query)
		var pgErr *pgconn.PgError
		// 55006: "source database is being accessed by other users", e.g.
		// a developer's psql session on the template; it passes.
		if !errors.As(err, &pgErr) || pgErr.Code != "55006" || attempt == 10 {
			if err != nil {
				return "", fmt.Errorf("create test database %s from %s: %w", name, s.template, err)
			}
			return name, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("create test database %s from %s: %w", name, s.template, err)
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		}
	}
}

// dropDatabase drops a test database, disconnecting whatever the test left
// connected (a process it started, a pool it did not close).
func (s *server) dropDatabase(ctx context.Context, name string) error {
	if _, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop test database %s: %w", name, err)
	}
	return nil
}

// uniqueName turns a test name into a database name: a prefix, the test
// name reduced to lowercase letters, digits and underscores, and a random
// suffix, within Postgres's 63-character limit.
func uniqueName(testName string) (string, error) {
	var b strings.Builder
	underscore := true // no leading underscore after the prefix
	for _, r := range strings.ToLower(testName) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			underscore = false
		} else if !underscore {
			b.WriteByte('_')
			underscore = true
		}
	}
	var random [4]byte
	if _, err := rand.Read(random[:]); err != nil {
		return "", fmt.Errorf("generate database name: %w", err)
	}
	suffix := hex.EncodeToString(random[:])
	middle := strings.TrimRight(b.String(), "_")
	middle = strings.TrimRight(middle[:min(len(middle), maxIdentifier-len(namePrefix)-1-len(suffix))], "_")
	if middle == "" {
		return namePrefix + suffix, nil
	}
	return namePrefix + middle + "_" + suffix, nil
}
