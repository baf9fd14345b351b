package migrations_test

import (
	"context"
	"strings"
	"testing"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers pgx5://
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/migrations"
)

// migrateTo moves the database at url to schema version.
func migrateTo(t *testing.T, url string, version uint) {
	t.Helper()
	src, err := iofs.New(migrations.FS, ".")
	require.NoError(t, err)
	m, err := migrate.NewWithSourceInstance("iofs", src, "pgx5://"+strings.TrimPrefix(url, "postgres://"))
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, m.Migrate(version))
}

// migrated returns a fresh database at schema version, its URL (for
// migrateTo) and a pool on it.
func migrated(t *testing.T, version uint) (string, *pgxpool.Pool) {
	t.Helper()
	url := dbtest.NewURL(t)
	migrateTo(t, url, version)
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return url, pool
}

// TestRideStatus migrates rides written before rides had a status, in
// every state a ride could be in, and checks what each is backfilled as.
func TestRideStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := migrated(t, 1)

	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err, sql)
	}
	exec(`INSERT INTO users (id, email, stripe_customer_id, api_token_hash)
	      VALUES (1, 'user@example.com', 'cus_1', sha256('token'))`)
	// One key and ride per case, by the same id: (recovery point,
	// response, attention reason, charge).
	for _, k := range []struct {
		id                      int
		point, code, body, flag string
		charge                  string
	}{
		{1, "finished", "201", `{"id": 1, "stripe_charge_id": "ch_1"}`, "", "ch_1"},
		{2, "finished", "402", `{"code": "card_declined", "status": 402}`, "", ""},
		{3, "finished", "502", `{"code": "payment_rejected", "status": 502}`, "", ""},
		{4, "ride_created", "", "", "charge outcome still unknown", ""},
		{5, "ride_created", "", "", "", ""},
		{6, "charge_created", "", "", "", "ch_6"},
	} {
		exec(`INSERT INTO idempotency_keys
		          (id, user_id, idempotency_key, request_method, request_path, request_params, origin_ip,
		           recovery_point, locked_at, response_code, response_body, attention_reason)
		      VALUES ($1::bigint, 1, 'key-' || $1::text, 'POST', '/rides', '{}', '127.0.0.1', $2, NULL,
		              nullif($3, '')::int, nullif($4, '')::jsonb, nullif($5, ''))`,
			k.id, k.point, k.code, k.body, k.flag)
		exec(`INSERT INTO rides (id, idempotency_key_id, origin_lat, origin_lon, target_lat, target_lon,
		                         amount, currency, stripe_charge_id, user_id)
		      VALUES ($1, $1, 0, 0, 1, 1, 2000, 'usd', nullif($2, ''), 1)`, k.id, k.charge)
	}
	// Rides whose keys the reaper removed: one charged, one not.
	exec(`INSERT INTO rides (id, origin_lat, origin_lon, target_lat, target_lon, amount, currency, stripe_charge_id, user_id)
	      VALUES (7, 0, 0, 1, 1, 2000, 'usd', 'ch_7', 1), (8, 0, 0, 1, 1, 2000, 'usd', NULL, 1)`)

	migrateTo(t, url, 2)

	statuses := map[int]string{}
	rows, err := pool.Query(ctx, `SELECT id, status FROM rides`)
	require.NoError(t, err)
	for rows.Next() {
		var (
			id     int
			status string
		)
		require.NoError(t, rows.Scan(&id, &status))
		statuses[id] = status
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[int]string{
		1: "succeeded",
		2: "declined",
		3: "failed",
		4: "needs_review",
		5: "pending",
		6: "succeeded",
		7: "succeeded",
		8: "needs_review",
	}, statuses)

	// Stored responses replay what the API answers now.
	body := func(id int) string {
		t.Helper()
		var b string
		require.NoError(t, pool.QueryRow(ctx, `SELECT response_body::text FROM idempotency_keys WHERE id = $1`, id).Scan(&b))
		return b
	}
	require.JSONEq(t, `{"id": 1, "stripe_charge_id": "ch_1", "status": "succeeded"}`, body(1))
	require.JSONEq(t, `{"code": "card_declined", "status": 402, "ride_id": 2}`, body(2))
	require.JSONEq(t, `{"code": "payment_rejected", "status": 502, "ride_id": 3}`, body(3))

	// And down again restores the stored responses as they were.
	pool.Reset()
	migrateTo(t, url, 1)
	require.JSONEq(t, `{"id": 1, "stripe_charge_id": "ch_1"}`, body(1))
	require.JSONEq(t, `{"code": "card_declined", "status": 402}`, body(2))
	var hasStatus bool
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_name = 'rides' AND column_name = 'status')`,
	).Scan(&hasStatus))
	require.False(t, hasStatus)
}

// TestKeyIdentity migrates a key written before keys had an identity: it
// keeps none (and with it its Stripe key), and every new key gets one.
func TestKeyIdentity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := migrated(t, 5)

	insertKey := func(key string) {
		t.Helper()
		_, err := pool.Exec(ctx, `
			INSERT INTO idempotency_keys (idempotency_key, request_method, request_params, request_path, origin_ip, user_id, recovery_point, locked_at)
			VALUES ($1, 'POST', '{}', '/rides', '127.0.0.1', 1, 'started', NULL)`, key)
		require.NoError(t, err)
	}
	_, err := pool.Exec(ctx, `INSERT INTO users (id, email, stripe_customer_id, api_token_hash)
	                         VALUES (1, 'user@example.com', 'cus_1', sha256('token'))`)
	require.NoError(t, err)
	insertKey("in-flight-during-upgrade")

	migrateTo(t, url, 6)
	insertKey("after-upgrade")
	identities := map[string]*string{}
	rows, err := pool.Query(ctx, `SELECT idempotency_key, identity::text FROM idempotency_keys`)
	require.NoError(t, err)
	for rows.Next() {
		var key string
		var identity *string
		require.NoError(t, rows.Scan(&key, &identity))
		identities[key] = identity
	}
	require.NoError(t, rows.Err())
	require.Nil(t, identities["in-flight-during-upgrade"], "an existing key keeps its old Stripe key")
	require.NotNil(t, identities["after-upgrade"])
	require.Len(t, *identities["after-upgrade"], 36)
}

// TestKeyStepsOnRow migrates the steps of a key from their table onto
// the key's row, in order and with their detail, and back; and upgrades a
// database whose keys carried their steps on the row already.
func TestKeyStepsOnRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// keySteps returns the events of key id's steps, in order, and the
	// detail of the last that has one.
	keySteps := func(t *testing.T, pool *pgxpool.Pool, id int) (events []string, detail *string) {
		t.Helper()
		rows, err := pool.Query(ctx, `
			SELECT s->>'event', s->>'detail' FROM idempotency_keys, jsonb_array_elements(steps) AS s
			WHERE id = $1`, id)
		require.NoError(t, err)
		for rows.Next() {
			var event string
			var d *string
			require.NoError(t, rows.Scan(&event, &d))
			events = append(events, event)
			if d != nil {
				detail = d
			}
		}
		require.NoError(t, rows.Err())
		return events, detail
	}
	const user = `INSERT INTO users (id, email, stripe_customer_id, api_token_hash)
		VALUES (1, 'user@example.com', 'cus_1', sha256('token'))`

	t.Run("MovesTheTableOntoTheRowAndBack", func(t *testing.T) {
		t.Parallel()
		url, pool := migrated(t, 7)
		_, err := pool.Exec(ctx, user+`;
			INSERT INTO idempotency_keys (id, idempotency_key, request_method, request_params, request_path,
			                              origin_ip, user_id, recovery_point, locked_at, claims)
			VALUES (1, 'set-aside', 'POST', '{}', '/rides', '127.0.0.1', 1, 'ride_created', NULL, 2),
			       (2, 'no-steps', 'POST', '{}', '/rides', '127.0.0.1', 1, 'started', NULL, 1);
			INSERT INTO idempotency_key_steps (idempotency_key_id, at, event, recovery_point, actor, attempt, detail)
			VALUES (1, '2026-11-01 10:00:02+00', 'set_aside', 'ride_created', 'completer', 2, 'charge outcome still unknown'),
			       (1, '2026-11-01 10:00:00+00', 'claimed', 'started', 'api', 1, NULL),
			       (1, '2026-11-01 10:00:01+00', 'reached', 'ride_created', 'api', 1, NULL)`)
		require.NoError(t, err)

		migrateTo(t, url, 8)
		events, detail := keySteps(t, pool, 1)
		require.Equal(t, []string{"claimed", "reached", "set_aside"}, events, "oldest first")
		require.NotNil(t, detail)
		require.Equal(t, "charge outcome still unknown", *detail)
		events, _ = keySteps(t, pool, 2)
		require.Empty(t, events)

		migrateTo(t, url, 7)
		var n int
		require.NoError(t, pool.QueryRow(ctx,
			`SELECT count(*) FROM idempotency_key_steps WHERE idempotency_key_id = 1 AND detail IS NOT NULL`).Scan(&n))
		require.Equal(t, 1, n, "the steps go back to their table")
	})

	t.Run("KeepsStepsAlreadyOnTheRow", func(t *testing.T) {
		t.Parallel()
		// The first release of 000004 put the steps on the key's row
		// itself: a database it migrated is at 7 with the column and
		// without the table.
		url, pool := migrated(t, 7)
		_, err := pool.Exec(ctx, `
			DROP TABLE idempotency_key_steps;
			ALTER TABLE idempotency_keys ADD COLUMN steps JSONB NOT NULL DEFAULT '[]'
			    CONSTRAINT idempotency_keys_steps_array CHECK (jsonb_typeof(steps) = 'array');
			`+user+`;
			INSERT INTO idempotency_keys (id, idempotency_key, request_method, request_params, request_path,
			                              origin_ip, user_id, recovery_point, locked_at, steps)
			VALUES (1, 'claimed', 'POST', '{}', '/rides', '127.0.0.1', 1, 'started', NULL,
			        '[{"at": "2026-11-01T10:00:00Z", "event": "claimed", "recovery_point": "started",
			           "actor": "api", "attempt": 1}]')`)
		require.NoError(t, err)

		migrateTo(t, url, 8)
		events, _ := keySteps(t, pool, 1)
		require.Equal(t, []string{"claimed"}, events)
	})
}
