package dbtest

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

func TestNew(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		ctx  context.Context
		pool *pgxpool.Pool
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{ctx: t.Context(), pool: New(t)}
	}

	t.Run("SeesProjectAndRiverTables", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		for _, table := range []string{"users", "idempotency_keys", "rides", "audit_records", "staged_jobs", "river_job"} {
			var exists bool
			err := bundle.pool.QueryRow(bundle.ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists)
			require.NoError(t, err)
			require.True(t, exists, "table %s missing from the test database", table)
		}
	})

	t.Run("IsolatesDatabases", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		other := New(t)
		_, err := bundle.pool.Exec(bundle.ctx,
			`INSERT INTO users (email, stripe_customer_id, api_token_hash) VALUES ('isolation@example.com', 'cus_isolation', sha256('token'))`)
		require.NoError(t, err)
		require.Equal(t, 1, countUsers(t, bundle.pool), "users in the database written to")
		require.Equal(t, 0, countUsers(t, other), "users in the other test's database")
	})

	t.Run("ClonesConcurrently", func(t *testing.T) {
		t.Parallel()
		for i := range 20 {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				bundle := setup(t)
				require.Equal(t, 0, countUsers(t, bundle.pool), "users in a fresh database")
			})
		}
	})
}

func TestNewURL(t *testing.T) {
	t.Parallel()

	t.Run("ConnectsToItsOwnDatabase", func(t *testing.T) {
		t.Parallel()
		dbURL := NewURL(t)
		u, err := url.Parse(dbURL)
		require.NoError(t, err)
		name := strings.TrimPrefix(u.Path, "/")
		require.True(t, strings.HasPrefix(name, namePrefix+"testnewurl_connectstoitsowndatabase_"), "database name %q does not name the test", name)
		require.Equal(t, name, currentDatabase(t, dbURL))
	})

	t.Run("DropsDatabaseOnCleanup", func(t *testing.T) {
		t.Parallel()
		var name string
		// Not parallel: t.Run returns once the subtest and its cleanups
		// have run.
		t.Run("Inner", func(t *testing.T) {
			dbURL := NewURL(t)
			name = currentDatabase(t, dbURL)
			// Left open on purpose, like a process a test started: the drop
			// must not wait for it.
			_, err := pgx.Connect(t.Context(), dbURL)
			require.NoError(t, err)
		})
		require.NotEmpty(t, name)
		require.False(t, databaseExists(t, name), "database %s still exists after its test ended", name)
	})
}

func TestCreateDatabase(t *testing.T) {
	t.Parallel()

	t.Run("ClonesTemplateConcurrently", func(t *testing.T) {
		t.Parallel()
		// Parallel subtests are capped at -parallel (GOMAXPROCS by
		// default), so goroutines are what puts 20 clones truly at once.
		srv := mustServer(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		const n = 20
		names := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { names[i], errs[i] = srv.createDatabase(ctx, t.Name()) })
		}
		wg.Wait()
		for i, err := range errs {
			if err == nil {
				t.Cleanup(func() { require.NoError(t, srv.dropDatabase(context.Background(), names[i])) })
			}
		}
		for _, err := range errs {
			require.NoError(t, err)
		}
	})
}

func TestTemplate(t *testing.T) {
	t.Parallel()

	t.Run("IsMarkedAndClosedToConnections", func(t *testing.T) {
		t.Parallel()
		srv := mustServer(t)
		var isTemplate, allowConn bool
		err := srv.admin.QueryRow(t.Context(), "SELECT datistemplate, datallowconn FROM pg_database WHERE datname = $1", srv.template).
			Scan(&isTemplate, &allowConn)
		require.NoError(t, err)
		require.True(t, isTemplate, "datistemplate of %s", srv.template)
		require.False(t, allowConn, "datallowconn of %s", srv.template)
	})

	t.Run("NameIsStableAndShort", func(t *testing.T) {
		t.Parallel()
		name := templateName()
		require.Equal(t, name, templateName())
		require.Regexp(t, `^rocketrides_tpl_[0-9a-f]{8}$`, name)
	})
}

func TestUniqueName(t *testing.T) {
	t.Parallel()

	for _, testName := range []string{
		"TestX",
		"TestCreateRide/ResumesFromRideCreated",
		"Test/" + strings.Repeat("VeryLongSubtestName", 10),
		"Test__Weird--Chars/#01",
		"",
	} {
		a, err := uniqueName(testName)
		require.NoError(t, err)
		b, err := uniqueName(testName)
		require.NoError(t, err)
		require.LessOrEqual(t, len(a), maxIdentifier, a)
		require.Regexp(t, `^rr_test_([a-z0-9]+_)*[0-9a-f]{8}$`, a)
		require.NotEqual(t, a, b, "two names for test %q", testName)
	}
}

func mustServer(t *testing.T) *server {
	t.Helper()
	srv, err := getServer()
	require.NoError(t, err)
	return srv
}

func countUsers(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM users").Scan(&n))
	return n
}

func currentDatabase(t *testing.T, dbURL string) string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dbURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var name string
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&name))
	return name
}

func databaseExists(t *testing.T, name string) bool {
	t.Helper()
	var exists bool
	err := mustServer(t).admin.QueryRow(t.Context(), "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists)
	require.NoError(t, err)
	return exists
}
