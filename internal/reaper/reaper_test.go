package reaper_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/reaper"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

// expired is safely past the default max age.
const expired = reaper.DefaultMaxAge + time.Hour

func TestReaper(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		*apitest.Stack
		reaper *reaper.Reaper
	}

	newReaper := func(t *testing.T, keys *idem.Store, config reaper.Config) *reaper.Reaper {
		t.Helper()
		config.Keys = keys
		config.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
		r, err := reaper.New(&config)
		require.NoError(t, err)
		return r
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		stack := apitest.New(t, apitest.Options{})
		return &testBundle{Stack: stack, reaper: newReaper(t, stack.Keys, reaper.Config{})}
	}

	runOnce := func(t *testing.T, b *testBundle) (reaped, abandoned int) {
		t.Helper()
		reaped, abandoned, err := b.reaper.RunOnce(context.Background())
		require.NoError(t, err)
		return reaped, abandoned
	}

	// backdate makes User's key look created age ago.
	backdate := func(t *testing.T, b *testBundle, key string, age time.Duration) {
		t.Helper()
		_, err := b.Pool.Exec(context.Background(), `
			UPDATE idempotency_keys SET created_at = now() - $3::interval, last_run_at = now() - $3::interval
			WHERE user_id = $1 AND idempotency_key = $2`, b.User.ID, key, age)
		require.NoError(t, err)
	}

	// postRide creates a ride through the API and returns its key.
	postRide := func(t *testing.T, b *testBundle) string {
		t.Helper()
		key := apitest.NewKey()
		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		return key
	}

	// insertKeys writes n keys for User directly, created age ago, every
	// other one unfinished; faster than n requests.
	insertKeys := func(t *testing.T, b *testBundle, n int, age time.Duration) {
		t.Helper()
		_, err := b.Pool.Exec(context.Background(), `
			INSERT INTO idempotency_keys
				(user_id, idempotency_key, request_method, request_path, request_params, origin_ip,
				 recovery_point, created_at, last_run_at, locked_at, response_code, response_body)
			SELECT $1, 'bulk-key-' || i, 'POST', '/rides', '{}', '192.0.2.1',
			       CASE WHEN i % 2 = 0 THEN 'finished' ELSE 'started' END,
			       now() - $3::interval, now() - $3::interval, NULL,
			       CASE WHEN i % 2 = 0 THEN 201 END, CASE WHEN i % 2 = 0 THEN '{}'::jsonb END
			FROM generate_series(1, $2::int) AS i`, b.User.ID, n, age)
		require.NoError(t, err)
	}

	t.Run("RemovesOldKeysAndKeepsNewOnes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		old, fresh := postRide(t, b), postRide(t, b)
		backdate(t, b, old, expired)

		reaped, abandoned := runOnce(t, b)
		require.Equal(t, 1, reaped)
		require.Zero(t, abandoned, "a finished key is deleted, not listed")
		require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1`, old))
		require.Equal(t, idem.Finished, b.KeyRow(t, fresh).RecoveryPoint)
		require.Zero(t, b.Count(t, `SELECT count(*) FROM abandoned_requests`))

		reaped, abandoned = runOnce(t, b)
		require.Zero(t, reaped+abandoned)
	})

	t.Run("RidesSurviveTheirKeys", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := postRide(t, b)
		keyID := b.KeyRow(t, key).ID
		chargeID := b.ChargesFor(keyID)[0].ID
		backdate(t, b, key, expired)

		reaped, _ := runOnce(t, b)
		require.Equal(t, 1, reaped)
		require.Equal(t, 1, b.Count(t,
			`SELECT count(*) FROM rides WHERE idempotency_key_id IS NULL AND stripe_charge_id = $1`, chargeID))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records`))
	})

	t.Run("ListsUnfinishedKeysForReview", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		b.Fail(rides.FailBeforeCharge, func(context.Context) error { return errors.New("injected failure") })
		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusInternalServerError, resp.Status, "%s", resp.Body)
		keyID := b.KeyRow(t, key).ID
		backdate(t, b, key, expired)

		reaped, abandoned := runOnce(t, b)
		require.Equal(t, 1, reaped)
		require.Equal(t, 1, abandoned)

		var (
			userID              int64
			clientKey, method   string
			path, point, reason string
			params              json.RawMessage
			createdAt, reapedAt time.Time
		)
		require.NoError(t, b.Pool.QueryRow(context.Background(), `
			SELECT user_id, idempotency_key, request_method, request_path, request_params,
			       recovery_point, reason, created_at, reaped_at
			FROM abandoned_requests WHERE idempotency_key_id = $1`, keyID,
		).Scan(&userID, &clientKey, &method, &path, &params, &point, &reason, &createdAt, &reapedAt))
		require.Equal(t, b.User.ID, userID)
		require.Equal(t, key, clientKey)
		require.Equal(t, http.MethodPost, method)
		require.Equal(t, rides.Path, path)
		require.JSONEq(t, `{"origin_lat": 37.7749, "origin_lon": -122.4194, "target_lat": 37.8044, "target_lon": -122.2712}`,
			string(params))
		require.Equal(t, string(rides.RideCreated), point)
		require.Equal(t, "not finished within 72h0m0s", reason)
		require.WithinDuration(t, time.Now().Add(-expired), createdAt, time.Minute)
		require.WithinDuration(t, time.Now(), reapedAt, time.Minute)

		// The ride it got as far as creating stays, without a charge.
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides WHERE idempotency_key_id IS NULL AND stripe_charge_id IS NULL`))
	})

	t.Run("LeavesKeysARequestIsWorking", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		b.Claim(t, key)
		_, err := b.Pool.Exec(context.Background(),
			`UPDATE idempotency_keys SET created_at = now() - $1::interval WHERE idempotency_key = $2`, expired, key)
		require.NoError(t, err)

		reaped, abandoned := runOnce(t, b)
		require.Zero(t, reaped+abandoned)
		require.NotNil(t, b.KeyRow(t, key).LockedAt)

		// Once the lock is stale the request is presumed dead.
		_, err = b.Pool.Exec(context.Background(),
			`UPDATE idempotency_keys SET locked_at = now() - $1::interval WHERE idempotency_key = $2`,
			2*b.Keys.LockTimeout(), key)
		require.NoError(t, err)
		reaped, abandoned = runOnce(t, b)
		require.Equal(t, 1, reaped)
		require.Equal(t, 1, abandoned)
	})

	t.Run("ReapsMoreKeysThanTheBatchSizeInOneRun", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.reaper = newReaper(t, b.Keys, reaper.Config{BatchSize: 10})
		insertKeys(t, b, 25, expired)
		fresh := postRide(t, b)

		reaped, abandoned := runOnce(t, b)
		require.Equal(t, 25, reaped)
		require.Equal(t, 13, abandoned)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM idempotency_keys`))
		require.Equal(t, idem.Finished, b.KeyRow(t, fresh).RecoveryPoint)
		require.Equal(t, 13, b.Count(t, `SELECT count(*) FROM abandoned_requests`))
	})

	t.Run("EmptyDatabase", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		reaped, abandoned := runOnce(t, b)
		require.Zero(t, reaped)
		require.Zero(t, abandoned)
	})

	t.Run("ConcurrentReapersDoNotDoubleCount", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n = 200
		insertKeys(t, b, n, expired)
		otherKeys, err := idem.New(&idem.Config{Pool: b.Pool})
		require.NoError(t, err)
		reapers := []*reaper.Reaper{
			newReaper(t, b.Keys, reaper.Config{BatchSize: 7}),
			newReaper(t, otherKeys, reaper.Config{BatchSize: 7}),
		}

		var (
			wg                sync.WaitGroup
			mu                sync.Mutex
			reaped, abandoned int
			start             = make(chan struct{})
		)
		for _, r := range reapers {
			wg.Go(func() {
				<-start
				// A batch can come back short because the other reaper
				// holds rows; keep going until a pass finds nothing.
				for {
					rp, ab, err := r.RunOnce(context.Background())
					if err != nil {
						t.Errorf("RunOnce: %v", err)
						return
					}
					mu.Lock()
					reaped, abandoned = reaped+rp, abandoned+ab
					mu.Unlock()
					if rp == 0 {
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()

		require.Equal(t, n, reaped)
		require.Equal(t, n/2, abandoned)
		require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys`))
		require.Equal(t, n/2, b.Count(t, `SELECT count(*) FROM abandoned_requests`))
	})

	t.Run("RunReapsUntilCancelled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.reaper = newReaper(t, b.Keys, reaper.Config{PollInterval: 20 * time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- b.reaper.Run(ctx) }()

		key := postRide(t, b)
		backdate(t, b, key, expired)
		require.Eventually(t, func() bool {
			var n int
			err := b.Pool.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_keys`).Scan(&n)
			return err == nil && n == 0
		}, time.Minute, 20*time.Millisecond)

		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after cancellation")
		}
	})

	// A reaped key leaves a record that refuses its late retries; the
	// reaper forgets records past their retention, so the table stays
	// bounded.
	t.Run("RecordsReapedKeysAndForgetsThemPastRetention", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.reaper = newReaper(t, b.Keys, reaper.Config{BatchSize: 2})
		keys := []string{postRide(t, b), postRide(t, b), postRide(t, b)}
		for _, key := range keys {
			backdate(t, b, key, expired)
		}
		reaped, _ := runOnce(t, b)
		require.Equal(t, 3, reaped)
		require.Equal(t, 3, b.Count(t, `SELECT count(*) FROM reaped_keys WHERE response_code = 201 AND resource_id IS NOT NULL`))

		// Two of the three first used longer ago than the retention.
		_, err := b.Pool.Exec(context.Background(), `
			UPDATE reaped_keys SET created_at = now() - $2::interval WHERE idempotency_key <> $1`,
			keys[0], reaper.DefaultRetainReaped+time.Hour)
		require.NoError(t, err)
		runOnce(t, b)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM reaped_keys`))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM reaped_keys WHERE idempotency_key = $1`, keys[0]))
	})

	t.Run("RejectsARetentionWithinTheMaxAge", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for want, config := range map[string]reaper.Config{
			"reaper: Config.RetainReaped must not be negative":                         {RetainReaped: -time.Hour},
			"reaper: Config.RetainReaped 72h0m0s must exceed Config.MaxAge 72h0m0s":    {RetainReaped: reaper.DefaultMaxAge},
			"reaper: Config.RetainReaped 720h0m0s must exceed Config.MaxAge 1000h0m0s": {MaxAge: 1000 * time.Hour},
		} {
			config.Keys = b.Keys
			_, err := reaper.New(&config)
			require.ErrorContains(t, err, want)
		}
	})

	t.Run("RejectsBadConfig", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for want, config := range map[string]reaper.Config{
			"reaper: Config.MaxAge must not be negative":       {MaxAge: -time.Hour},
			"reaper: Config.BatchSize must not be negative":    {BatchSize: -1},
			"reaper: Config.PollInterval must not be negative": {PollInterval: -time.Second},
			"reaper: Config.DutyCycle must be between 0 and 1": {DutyCycle: 1.5},
			// Younger keys may still be retried.
			"reaper: Config.MaxAge 1m30s must exceed the idempotency lock timeout": {MaxAge: b.Keys.LockTimeout()},
		} {
			config.Keys = b.Keys
			_, err := reaper.New(&config)
			require.ErrorContains(t, err, want)
		}
		_, err := reaper.New(nil)
		require.ErrorContains(t, err, "reaper: Config is required")
		_, err = reaper.New(&reaper.Config{})
		require.ErrorContains(t, err, "reaper: Config.Keys is required")
	})
}
