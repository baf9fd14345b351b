package rides_test

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
)

// TestCreateRideThroughPooler runs rides through PgBouncer in transaction
// mode in each of pgx's exec modes that start behind it (the default,
// cache_statement, is refused at start by db.Preflight). Every statement
// of a ride binds its parameters in the mode under test: the JSON ones
// must reach their jsonb columns as JSON, not as bytea.
func TestCreateRideThroughPooler(t *testing.T) {
	t.Parallel()
	if _, ok := os.LookupEnv("TEST_DATABASE_URL"); ok {
		t.Skip("the pooler fronts the project-local cluster, not TEST_DATABASE_URL")
	}
	pooler := startPooler(t)

	for _, mode := range []string{"cache_describe", "describe_exec", "exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			direct, err := url.Parse(dbtest.NewURL(t))
			require.NoError(t, err)
			pooled := pooler.DatabaseURL(strings.TrimPrefix(direct.Path, "/")) + "&default_query_exec_mode=" + mode
			pool, err := db.Open(ctx, pooled, 0)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			require.NoError(t, db.Preflight(ctx, pool, db.PreflightConfig{}), "the api starts in %s mode behind the pooler", mode)
			b := apitest.New(t, apitest.Options{Pool: pool})

			key := apitest.NewKey()
			first := b.PostRide(t, key, apitest.DefaultParams)
			require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
			replay := b.PostRide(t, key, apitest.DefaultParams)
			require.Equal(t, http.StatusCreated, replay.Status, "%s", replay.Body)
			require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
			require.Equal(t, string(first.Body), string(replay.Body), "replay is byte for byte")
			// Another request under the same key: the locking path
			// compares the parameters as jsonb.
			reused := b.PostRide(t, key, strings.Replace(apitest.DefaultParams, "37.7749", "37.7", 1))
			require.Equal(t, http.StatusUnprocessableEntity, reused.Status, "%s", reused.Body)

			// A declined card finishes its key with a stored 402.
			declined := b.Do(t, http.MethodPost, "/rides", apitest.DefaultParams,
				"Authorization", "Bearer "+b.BadSourceToken, "Idempotency-Key", apitest.NewKey(),
				"Content-Type", formType)
			require.Equal(t, http.StatusPaymentRequired, declined.Status, "%s", declined.Body)

			// The JSON the ride wrote is JSON in its columns.
			row := b.KeyRow(t, key)
			charges := b.ChargesFor(row.ID)
			require.Len(t, charges, 1, "charges for key %d", row.ID)
			require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE id = $1 AND request_params ? 'origin_lat'`, row.ID))
			require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'ride.created' AND user_id = $1 AND data ? 'origin_lat'`, b.User.ID))
			require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM staged_jobs WHERE job_args->>'stripe_charge_id' = $1`, charges[0].ID))
		})
	}
}

// startPooler starts a PgBouncer of the test's own in transaction mode in
// front of the project-local cluster, stopped when the test ends.
func startPooler(t *testing.T) *localpg.Pooler {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := localpg.Ensure(ctx, localpg.Options{})
	require.NoError(t, err)
	// Under the cluster's parent, which pgbouncer (run as another user
	// when the test runs as root) can reach.
	dir, err := os.MkdirTemp(filepath.Dir(c.DataDir), "pgbouncer-rides-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	p, err := localpg.NewPooler(localpg.PoolerOptions{Dir: dir, Port: port, UpstreamPort: c.Port, PoolMode: "transaction"})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, p.Stop(context.Background()))
		require.NoError(t, os.RemoveAll(dir))
	})
	require.NoError(t, p.Start(ctx))
	return p
}
