package idem

// An internal test, so that it can EXPLAIN the completer's claim as the
// store sends it.

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
)

const (
	testLockTimeout   = time.Minute
	testMinAge        = 5 * time.Minute
	testRetryInterval = time.Minute
	testMaxAge        = 72 * time.Hour
)

type abandonedBundle struct {
	pool   *pgxpool.Pool
	store  *Store
	userID int64
	// stores are the store on each of its paths, fast and plain (see
	// Config.Plain), for what a claim decides.
	stores []*Store
}

func setupAbandoned(t *testing.T) *abandonedBundle {
	t.Helper()
	pool := dbtest.New(t)
	var userID int64
	require.NoError(t, pool.QueryRow(context.Background(), `
		INSERT INTO users (email, stripe_customer_id, api_token_hash)
		VALUES ('abandoned@example.com', 'cus_abandoned', sha256('t'))
		RETURNING id`).Scan(&userID))
	store, err := New(&Config{Pool: pool, LockTimeout: testLockTimeout})
	require.NoError(t, err)
	plain, err := New(&Config{Pool: pool, LockTimeout: testLockTimeout, Plain: true})
	require.NoError(t, err)
	return &abandonedBundle{
		pool:   pool,
		store:  store,
		userID: userID,
		stores: []*Store{store, plain},
	}
}

// keyState describes a key as some earlier request left it.
type keyState struct {
	point     RecoveryPoint
	age       time.Duration  // since created_at
	idle      time.Duration  // since last_run_at
	lockedAgo *time.Duration // nil: unlocked
	attention *string
}

func ago(d time.Duration) *time.Duration { return &d }

// insertKey writes a key row directly, as the API would have left it.
func insertKey(t *testing.T, b *abandonedBundle, st keyState) *Key {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `
		INSERT INTO idempotency_keys
			(user_id, idempotency_key, request_method, request_path, request_params, origin_ip,
			 recovery_point, created_at, last_run_at, locked_at, lock_token,
			 response_code, response_body, attention_reason)
		VALUES ($1, $2, 'POST', '/rides', '{"a": 1}', '192.0.2.1',
		        $3::text, now() - $4::interval, now() - $5::interval,
		        now() - $6::interval, CASE WHEN $6::interval IS NOT NULL THEN gen_random_uuid() END,
		        CASE WHEN $3 = 'finished' THEN 201 END, CASE WHEN $3 = 'finished' THEN '{"id": 1}'::jsonb END,
		        $7)
		RETURNING id, created_at, idempotency_key, last_run_at, locked_at, lock_token,
		          request_method, request_params, request_path, origin_ip,
		          response_code, response_body, recovery_point, user_id,
		          first_foreign_attempt_at, unknown_outcomes, attention_reason, claims, identity`,
		b.userID, uuid.NewString(), st.point, st.age, st.idle, st.lockedAgo, st.attention)
	require.NoError(t, err)
	key, err := collectKey(rows, nil)
	require.NoError(t, err)
	return key
}

func keyIDs(keys []*Key) []int64 {
	ids := make([]int64, 0, len(keys))
	for _, k := range keys {
		ids = append(ids, k.ID)
	}
	slices.Sort(ids)
	return ids
}

func reapedIDs(keys []ReapedKey) []int64 {
	ids := make([]int64, 0, len(keys))
	for _, k := range keys {
		ids = append(ids, k.ID)
	}
	slices.Sort(ids)
	return ids
}

func TestClaimAbandoned(t *testing.T) {
	t.Parallel()

	claim := func(t *testing.T, b *abandonedBundle, limit int) []*Key {
		t.Helper()
		keys, err := b.store.ClaimAbandoned(context.Background(), testMinAge, testRetryInterval, limit)
		require.NoError(t, err)
		return keys
	}

	t.Run("ClaimsOnlyAbandonedKeys", func(t *testing.T) {
		t.Parallel()
		b := setupAbandoned(t)
		attention := "charge outcome unknown"
		unlocked := insertKey(t, b, keyState{point: Started, age: time.Hour, idle: time.Hour})
		stale := insertKey(t, b, keyState{point: "halfway", age: time.Hour, idle: time.Hour, lockedAgo: ago(2 * testLockTimeout)})
		ignored := []*Key{
			insertKey(t, b, keyState{point: Started, age: time.Minute, idle: time.Hour}),                            // too young
			insertKey(t, b, keyState{point: Started, age: time.Hour, idle: 10 * time.Second}),                       // ran recently
			insertKey(t, b, keyState{point: Finished, age: time.Hour, idle: time.Hour}),                             // finished
			insertKey(t, b, keyState{point: Started, age: time.Hour, idle: time.Hour, lockedAgo: ago(time.Second)}), // live lock
			insertKey(t, b, keyState{point: "halfway", age: time.Hour, idle: time.Hour, attention: &attention}),     // set aside for a human
		}

		keys := claim(t, b, 100)
		require.Equal(t, []int64{unlocked.ID, stale.ID}, keyIDs(keys))
		for _, k := range keys {
			require.NotNil(t, k.LockedAt)
			require.NotNil(t, k.LockToken)
			require.WithinDuration(t, time.Now(), *k.LockedAt, 10*time.Second)
			require.WithinDuration(t, time.Now(), k.LastRunAt, 10*time.Second)
			if k.ID == stale.ID {
				require.NotEqual(t, *stale.LockToken, *k.LockToken, "the stale lock's holder is fenced off")
				require.Equal(t, RecoveryPoint("halfway"), k.RecoveryPoint)
			}
		}

		// The others are untouched.
		for _, want := range ignored {
			var got Key
			require.NoError(t, b.pool.QueryRow(context.Background(),
				`SELECT last_run_at, lock_token FROM idempotency_keys WHERE id = $1`, want.ID,
			).Scan(&got.LastRunAt, &got.LockToken))
			require.True(t, want.LastRunAt.Equal(got.LastRunAt), "key %d", want.ID)
			require.Equal(t, want.LockToken, got.LockToken, "key %d", want.ID)
		}
	})

	t.Run("LongestWaitingFirstUpToLimit", func(t *testing.T) {
		t.Parallel()
		b := setupAbandoned(t)
		threeHours := insertKey(t, b, keyState{point: Started, age: 4 * time.Hour, idle: 3 * time.Hour})
		insertKey(t, b, keyState{point: Started, age: 4 * time.Hour, idle: time.Hour})
		twoHours := insertKey(t, b, keyState{point: Started, age: 4 * time.Hour, idle: 2 * time.Hour})

		require.Equal(t, []int64{threeHours.ID, twoHours.ID}, keyIDs(claim(t, b, 2)))
	})

	t.Run("ClaimedKeyIsNotClaimedAgain", func(t *testing.T) {
		t.Parallel()
		b := setupAbandoned(t)
		insertKey(t, b, keyState{point: Started, age: time.Hour, idle: time.Hour})

		require.Len(t, claim(t, b, 10), 1)
		require.Empty(t, claim(t, b, 10))

		// Released (the completer failed and unlocked it), it still waits
		// out the retry interval.
		_, err := b.pool.Exec(context.Background(), `UPDATE idempotency_keys SET locked_at = NULL, lock_token = NULL`)
		require.NoError(t, err)
		require.Empty(t, claim(t, b, 10))
	})

	t.Run("SkipsKeysLockedByAnotherTransaction", func(t *testing.T) {
		t.Parallel()
		b := setupAbandoned(t)
		ctx := context.Background()
		held := insertKey(t, b, keyState{point: Started, age: time.Hour, idle: 2 * time.Hour})
		free := insertKey(t, b, keyState{point: Started, age: time.Hour, idle: time.Hour})

		// Another completer's claim, caught mid-statement.
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }() // for a failed require; a no-op after the rollback below
		_, err = tx.Exec(ctx, `SELECT 1 FROM idempotency_keys WHERE id = $1 FOR UPDATE`, held.ID)
		require.NoError(t, err)

		// Without SKIP LOCKED this would wait for tx and time out.
		claimCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		keys, err := b.store.ClaimAbandoned(claimCtx, testMinAge, testRetryInterval, 10)
		require.NoError(t, err)
		require.Equal(t, []int64{free.ID}, keyIDs(keys))

		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, []int64{held.ID}, keyIDs(claim(t, b, 10)))
	})

	t.Run("FencesOffTheRequestWhoseLockWentStale", func(t *testing.T) {
		t.Parallel()
		b := setupAbandoned(t)
		ctx := context.Background()
		stalled, _, err := b.store.Claim(ctx, Request{
			UserID: b.userID, Key: uuid.NewString(), Method: "POST", Path: "/rides",
			Params: []byte(`{"a": 1}`), OriginIP: netip.MustParseAddr("192.0.2.1"),
		})
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `
			UPDATE idempotency_keys
			SET created_at = now() - interval '1 hour', last_run_at = now() - interval '1 hour',
			    locked_at = now() - interval '2 minutes'
			WHERE id = $1`, stalled.ID)
		require.NoError(t, err)

		keys := claim(t, b, 10)
		require.Len(t, keys, 1)
		advance := func(_ context.Context, tx *Tx) error { tx.Move(Advance("halfway")); return nil }
		require.ErrorIs(t, b.store.Phase(ctx, stalled, advance), ErrLockLost)
		require.NoError(t, b.store.Phase(ctx, keys[0], advance))
	})

	t.Run("EmptyTable", func(t *testing.T) {
		t.Parallel()
		b := setupAbandoned(t)
		require.Empty(t, claim(t, b, 10))
	})

	// The claim must stay cheap however many finished keys pile up
	// before the reaper removes them: its scan goes through the partial
	// index of unfinished keys.
	t.Run("UsesPartialIndexOfUnfinishedKeys", func(t *testing.T) {
		t.Parallel()
		b := setupAbandoned(t)
		ctx := context.Background()
		_, err := b.pool.Exec(ctx, `
			INSERT INTO idempotency_keys
				(user_id, idempotency_key, request_method, request_path, request_params, origin_ip,
				 recovery_point, created_at, last_run_at, locked_at, response_code, response_body)
			SELECT $1, 'finished-' || n, 'POST', '/rides', '{}', '192.0.2.1',
			       'finished', now() - interval '1 day', now() - interval '1 day', NULL, 201, '{}'
			FROM generate_series(1, 20000) AS n`, b.userID)
		require.NoError(t, err)
		for range 20 {
			insertKey(t, b, keyState{point: Started, age: time.Hour, idle: time.Hour})
		}
		_, err = b.pool.Exec(ctx, `ANALYZE idempotency_keys`)
		require.NoError(t, err)

		rows, err := b.pool.Query(ctx, `EXPLAIN `+claimAbandonedSQL,
			testMinAge, testRetryInterval, testLockTimeout, 100, DefaultActor)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		plan := strings.Join(lines, "\n")
		t.Log(plan)
		require.Contains(t, plan, "idempotency_keys_unfinished_last_run_at")
	})
}

func TestReap(t *testing.T) {
	t.Parallel()

	old := testMaxAge + time.Hour

	reap := func(t *testing.T, b *abandonedBundle, limit int) []ReapedKey {
		t.Helper()
		keys, err := b.store.Reap(context.Background(), testMaxAge, limit, nil)
		require.NoError(t, err)
		return keys
	}
	remaining := func(t *testing.T, b *abandonedBundle) []int64 {
		t.Helper()
		rows, err := b.pool.Query(context.Background(), `SELECT id FROM idempotency_keys ORDER BY id`)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		return ids
	}

	t.Run("DeletesExpiredKeysAndListsUnfinishedOnes", func(t *testing.T) {
		t.Parallel()
		b := setupAbandoned(t)
		oldFinished := insertKey(t, b, keyState{point: Finished, age: old, idle: old})
		oldUnfinished := insertKey(t, b, keyState{point: "halfway", age: old, idle: 2 * time.Hour})
		newFinished := insertKey(t, b, keyState{point: Finished, age: time.Hour, idle: time.Hour})
		newUnfinished := insertKey(t, b, keyState{point: Started, age: time.Hour, idle: time.Hour})

		reaped := reap(t, b, 100)
		require.Equal(t, []int64{oldFinished.ID, oldUnfinished.ID}, reapedIDs(reaped))
		for _, k := range reaped {
			require.Equal(t, k.ID == oldUnfinished.ID, k.Abandoned(), "key %d", k.ID)
			require.Equal(t, b.userID, k.UserID)
		}
		require.Equal(t, []int64{newFinished.ID, newUnfinished.ID}, remaining(t, b))

		type abandonedRequest struct {
			IdempotencyKeyID int64           `db:"idempotency_key_id"`
			UserID           int64           `db:"user_id"`
			IdempotencyKey   string          `db:"idempotency_key"`
			RequestMethod    string          `db:"request_method"`
			RequestPath      string          `db:"request_path"`
			RequestParams    json.RawMessage `db:"request_params"`
			RecoveryPoint    RecoveryPoint   `db:"recovery_point"`
			CreatedAt        time.Time       `db:"created_at"`
			LastRunAt        time.Time       `db:"last_run_at"`
			ReapedAt         time.Time       `db:"reaped_at"`
			Reason           string          `db:"reason"`
		}
		rows, err := b.pool.Query(context.Background(), `SELECT * FROM abandoned_requests`)
		require.NoError(t, err)
		listed, err := pgx.CollectRows(rows, pgx.RowToStructByName[abandonedRequest])
		require.NoError(t, err)
		require.Len(t, listed, 1, "only the unfinished key is listed")
		got := listed[0]
		require.Equal(t, oldUnfinished.ID, got.IdempotencyKeyID)
		require.Equal(t, b.userID, got.UserID)
		require.Equal(t, oldUnfinished.IdempotencyKey, got.IdempotencyKey)
		require.Equal(t, "POST", got.RequestMethod)
		require.Equal(t, "/rides", got.RequestPath)
		require.JSONEq(t, `{"a": 1}`, string(got.RequestParams))
		require.Equal(t, RecoveryPoint("halfway"), got.RecoveryPoint)
		require.True(t, oldUnfinished.CreatedAt.Equal(got.CreatedAt))
		require.True(t, oldUnfinished.LastRunAt.Equal(got.LastRunAt))
		require.WithinDuration(t, time.Now(), got.ReapedAt, 10*time.Second)
		require.Equal(t, "not finished within 72h0m0s", got.Reason)
	})

	t.Run("KeepsTheReasonAKeyWasSetAside", func(t *testing.T) {
		t.Parallel()
		b := setupAbandoned(t)
		attention := "charge outcome still unknown after 10 attempts"
		insertKey(t, b, keyState{point: "halfway", age: old, idle: old, attention: &attention})

		reaped := reap(t, b, 100)
		require.Len(t, reaped, 1)
		require.True(t, reaped[0].Abandoned())
		require.Equal(t, "set aside for attention: "+attention, *reaped[0].Reason)
	})

	t.Run("LeavesKeysUnderALiveLock", func(t *testing.T) {
		t.Parallel()
		b := setupAbandoned(t)
		live := insertKey(t, b, keyState{point: "halfway", age: old, idle: time.Second, lockedAgo: ago(time.Second)})
		stale := insertKey(t, b, keyState{point: "halfway", age: old, idle: old, lockedAgo: ago(2 * testLockTimeout)})

		require.Equal(t, []int64{stale.ID}, reapedIDs(reap(t, b, 100)))
		require.Equal(t, []int64{live.ID}, remaining(t, b))
	})

	t.Run("BatchesAndSkipsLockedRows", func(t *testing.T) {
		t.Parallel()
		b := setupAbandoned(t)
		ctx := context.Background()
		var keys []*Key
		for range 5 {
			keys = append(keys, insertKey(t, b, keyState{point: Finished, age: old, idle: old}))
		}

		require.Equal(t, []int64{keys[0].ID, keys[1].ID}, reapedIDs(reap(t, b, 2)), "lowest ids first")

		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }() // for a failed require; a no-op after the rollback below
		_, err = tx.Exec(ctx, `SELECT 1 FROM idempotency_keys WHERE id = $1 FOR UPDATE`, keys[2].ID)
		require.NoError(t, err)

		reapCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		reaped, err := b.store.Reap(reapCtx, testMaxAge, 100, nil)
		require.NoError(t, err)
		require.Equal(t, []int64{keys[3].ID, keys[4].ID}, reapedIDs(reaped))

		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, []int64{keys[2].ID}, reapedIDs(reap(t, b, 100)))
		require.Empty(t, reap(t, b, 100))
	})

	t.Run("EmptyTable", func(t *testing.T) {
		t.Parallel()
		b := setupAbandoned(t)
		require.Empty(t, reap(t, b, 100))
	})
}

// TestReapedKeys: every reaped key leaves a record that refuses the key's
// late retries, until the record ages out.
func TestReapedKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	old := testMaxAge + time.Hour

	reap := func(t *testing.T, b *abandonedBundle) []ReapedKey {
		t.Helper()
		keys, err := b.store.Reap(ctx, testMaxAge, 100, nil)
		require.NoError(t, err)
		return keys
	}
	// request is the request insertKey's keys were made for.
	request := func(b *abandonedBundle, key string) Request {
		return Request{UserID: b.userID, Key: key, Method: "POST", Path: "/rides",
			Params: []byte(`{"a": 1}`), OriginIP: netip.MustParseAddr("192.0.2.1")}
	}
	// created names resource id on key, as a phase that created it would.
	created := func(t *testing.T, b *abandonedBundle, key *Key, id int64) {
		t.Helper()
		_, err := b.pool.Exec(ctx, `UPDATE idempotency_keys SET resource_id = $2 WHERE id = $1`, key.ID, id)
		require.NoError(t, err)
	}

	t.Run("ReapRecordsEveryKey", func(t *testing.T) {
		t.Parallel()
		b := setupAbandoned(t)
		finished := insertKey(t, b, keyState{point: Finished, age: old, idle: old})
		created(t, b, finished, 42)
		unfinished := insertKey(t, b, keyState{point: "halfway", age: old, idle: old})
		reaped := reap(t, b)
		require.Len(t, reaped, 2)
		require.Equal(t, int64(42), *reaped[0].ResourceID)
		require.Equal(t, "/rides", reaped[0].RequestPath)
		require.Nil(t, reaped[1].ResourceID)

		type record struct {
			UserID              int64     `db:"user_id"`
			IdempotencyKey      string    `db:"idempotency_key"`
			IdempotencyKeyID    int64     `db:"idempotency_key_id"`
			RequestMethod       string    `db:"request_method"`
			RequestPath         string    `db:"request_path"`
			RequestParamsSHA256 []byte    `db:"request_params_sha256"`
			ResponseCode        *int      `db:"response_code"`
			ResourceID          *int64    `db:"resource_id"`
			CreatedAt           time.Time `db:"created_at"`
			ReapedAt            time.Time `db:"reaped_at"`
		}
		rows, err := b.pool.Query(ctx, `SELECT * FROM reaped_keys ORDER BY idempotency_key_id`)
		require.NoError(t, err)
		records, err := pgx.CollectRows(rows, pgx.RowToStructByName[record])
		require.NoError(t, err)
		require.Len(t, records, 2)
		hash := sha256.Sum256([]byte(`{"a": 1}`)) // the JSONB text of the params
		for i, key := range []*Key{finished, unfinished} {
			got := records[i]
			require.Equal(t, key.ID, got.IdempotencyKeyID)
			require.Equal(t, key.IdempotencyKey, got.IdempotencyKey)
			require.Equal(t, b.userID, got.UserID)
			require.Equal(t, "POST", got.RequestMethod)
			require.Equal(t, "/rides", got.RequestPath)
			require.Equal(t, hash[:], got.RequestParamsSHA256)
			require.True(t, key.CreatedAt.Equal(got.CreatedAt))
			require.WithinDuration(t, time.Now(), got.ReapedAt, 10*time.Second)
		}
		require.Equal(t, 201, *records[0].ResponseCode)
		require.Equal(t, int64(42), *records[0].ResourceID)
		require.Nil(t, records[1].ResponseCode, "never finished")
		require.Nil(t, records[1].ResourceID)
	})

	t.Run("ClaimOfTheSameRequestIsExpired", func(t *testing.T) {
		t.Parallel()
		b := setupAbandoned(t)
		key := insertKey(t, b, keyState{point: Finished, age: old, idle: old})
		created(t, b, key, 42)
		reap(t, b)

		// Params spaced differently: the same request.
		req := request(b, key.IdempotencyKey)
		req.Params = []byte(`{ "a" : 1 }`)
		for _, store := range b.stores {
			_, _, err := store.Claim(ctx, req)
			var expired *ExpiredError
			require.ErrorAs(t, err, &expired)
			require.ErrorIs(t, err, ErrKeyExpired)
			require.Equal(t, key.ID, expired.KeyID)
			require.Equal(t, 201, *expired.ResponseCode)
			require.Equal(t, int64(42), *expired.ResourceID)
			require.True(t, key.CreatedAt.Equal(expired.CreatedAt))
			var n int
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&n))
			require.Zero(t, n, "the claim inserted no key")
		}
	})

	t.Run("ClaimOfAnotherRequestIsReused", func(t *testing.T) {
		t.Parallel()
		b := setupAbandoned(t)
		key := insertKey(t, b, keyState{point: Finished, age: old, idle: old})
		reap(t, b)
		for _, change := range []func(*Request){
			func(r *Request) { r.Params = []byte(`{"a": 2}`) },
			func(r *Request) { r.Path = "/tips" },
			func(r *Request) { r.Method = "PUT" },
		} {
			req := request(b, key.IdempotencyKey)
			change(&req)
			for _, store := range b.stores {
				_, _, err := store.Claim(ctx, req)
				require.ErrorIs(t, err, ErrKeyReused)
				require.NotErrorIs(t, err, ErrKeyExpired)
			}
		}
	})

	t.Run("ForgetsRecordsPastRetention", func(t *testing.T) {
		t.Parallel()
		b := setupAbandoned(t)
		const retention = 30 * 24 * time.Hour
		for range 5 {
			insertKey(t, b, keyState{point: Finished, age: retention + time.Hour, idle: old})
		}
		young := insertKey(t, b, keyState{point: Finished, age: old, idle: old})
		require.Len(t, reap(t, b), 6)

		forgotten, err := b.store.ForgetReaped(ctx, retention, 3)
		require.NoError(t, err)
		require.Equal(t, 3, forgotten, "a batch at a time")
		forgotten, err = b.store.ForgetReaped(ctx, retention, 3)
		require.NoError(t, err)
		require.Equal(t, 2, forgotten)
		forgotten, err = b.store.ForgetReaped(ctx, retention, 3)
		require.NoError(t, err)
		require.Zero(t, forgotten)

		// The young record still refuses; a forgotten one does not.
		_, _, err = b.store.Claim(ctx, request(b, young.IdempotencyKey))
		require.ErrorIs(t, err, ErrKeyExpired)
	})

	// An endpoint's writes about the reaped keys commit with the batch or
	// not at all.
	t.Run("SettleCommitsWithTheBatch", func(t *testing.T) {
		t.Parallel()
		b := setupAbandoned(t)
		key := insertKey(t, b, keyState{point: "halfway", age: old, idle: old})
		count := func(table string) int {
			var n int
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n))
			return n
		}

		_, err := b.store.Reap(ctx, testMaxAge, 100, func(_ context.Context, tx *Tx, reaped []ReapedKey) error {
			require.Equal(t, []int64{key.ID}, reapedIDs(reaped))
			tx.Queue(`INSERT INTO staged_jobs (job_name, job_args) VALUES ('settle', '{}')`)
			tx.Queue(`SELECT 1/0`)
			return nil
		})
		require.Error(t, err)
		require.Equal(t, []int{1, 0, 0, 0}, []int{count("idempotency_keys"), count("reaped_keys"), count("abandoned_requests"), count("staged_jobs")},
			"the batch rolled back with the endpoint's writes")

		_, err = b.store.Reap(ctx, testMaxAge, 100, func(_ context.Context, tx *Tx, _ []ReapedKey) error {
			tx.Queue(`INSERT INTO staged_jobs (job_name, job_args) VALUES ('settle', '{}')`)
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, []int{0, 1, 1, 1}, []int{count("idempotency_keys"), count("reaped_keys"), count("abandoned_requests"), count("staged_jobs")})
	})
}

// TestClaimAsTheKeyIsReaped covers the one window the claim's guard
// leaves: a claim whose insert runs in the instant the reaper deletes the
// key's earlier row waits for that row, then inserts, its guard having
// read reaped_keys before the reaper committed. The key then exists next
// to its predecessor's record, which is the state made here; the first
// phase's fence finds the record, retires the key, and refuses the
// request as the claim would have.
func TestClaimAsTheKeyIsReaped(t *testing.T) {
	t.Parallel()
	for i, path := range []string{"Fast", "Plain"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			b := setupAbandoned(t)
			b.store = b.stores[i]
			testClaimAsTheKeyIsReaped(t, b)
		})
	}
}

func testClaimAsTheKeyIsReaped(t *testing.T, b *abandonedBundle) {
	ctx := context.Background()
	old := insertKey(t, b, keyState{point: Finished, age: testMaxAge + time.Hour, idle: time.Hour})
	_, err := b.pool.Exec(ctx, `UPDATE idempotency_keys SET resource_id = 42 WHERE id = $1`, old.ID)
	require.NoError(t, err)
	_, err = b.store.Reap(ctx, testMaxAge, 100, nil)
	require.NoError(t, err)
	// Hide the record while the claim runs, as the reaper's uncommitted
	// transaction did.
	_, err = b.pool.Exec(ctx, `ALTER TABLE reaped_keys RENAME TO reaped_keys_hidden; CREATE TABLE reaped_keys (LIKE reaped_keys_hidden)`)
	require.NoError(t, err)
	key, _, err := b.store.Claim(ctx, Request{UserID: b.userID, Key: old.IdempotencyKey, Method: "POST", Path: "/rides",
		Params: []byte(`{"a": 1}`), OriginIP: netip.MustParseAddr("192.0.2.1")})
	require.NoError(t, err, "the claim cannot see the record")
	_, err = b.pool.Exec(ctx, `DROP TABLE reaped_keys; ALTER TABLE reaped_keys_hidden RENAME TO reaped_keys`)
	require.NoError(t, err)

	var wrote bool
	err = b.store.Phase(ctx, key, func(_ context.Context, tx *Tx) error {
		tx.Move(Advance("halfway"))
		wrote = true
		return nil
	})
	var expired *ExpiredError
	require.ErrorAs(t, err, &expired)
	require.Equal(t, old.ID, expired.KeyID)
	require.Equal(t, int64(42), *expired.ResourceID)
	require.Equal(t, !b.store.plain, wrote, "the phase ran and rolled back, or on the plain path its fence came first")
	var keys int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&keys))
	require.Zero(t, keys, "the key claimed in the window is retired")
}
