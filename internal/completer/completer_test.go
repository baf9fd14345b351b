package completer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/completer"
	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

func TestCompleter(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		*apitest.Stack
		completer *completer.Completer
	}

	newCompleter := func(t *testing.T, keys *idem.Store, service *rides.Service, config completer.Config) *completer.Completer {
		t.Helper()
		config.Keys, config.Service = keys, service
		config.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
		c, err := completer.New(&config)
		require.NoError(t, err)
		return c
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		stack := apitest.New(t, apitest.Options{})
		return &testBundle{Stack: stack, completer: newCompleter(t, stack.Keys, stack.Service, completer.Config{})}
	}

	runOnce := func(t *testing.T, b *testBundle) (succeeded, failed int) {
		t.Helper()
		succeeded, failed, err := b.completer.RunOnce(context.Background())
		require.NoError(t, err)
		return succeeded, failed
	}

	// backdate makes key look created createdAgo and last worked idleFor
	// ago.
	backdate := func(t *testing.T, b *testBundle, keyID int64, createdAgo, idleFor time.Duration) {
		t.Helper()
		_, err := b.Pool.Exec(context.Background(), `
			UPDATE idempotency_keys
			SET created_at = now() - $2::interval, last_run_at = now() - $3::interval
			WHERE id = $1`, keyID, createdAgo, idleFor)
		require.NoError(t, err)
	}

	// abandon posts a ride for User that fails at failpoint, as a request
	// whose client then went away. The key is left as the failure left
	// it, unlocked at its last recovery point; it is the caller's to
	// backdate.
	abandon := func(t *testing.T, b *testBundle, failpoint string) (key string, row *idem.Key) {
		t.Helper()
		key = apitest.NewKey()
		b.Fail(failpoint, func(context.Context) error { return errors.New("injected failure") })
		resp := b.PostRide(t, key, apitest.DefaultParams)
		b.Fail(failpoint, nil)
		require.Equal(t, http.StatusInternalServerError, resp.Status, "%s", resp.Body)
		row = b.KeyRow(t, key)
		require.Nil(t, row.LockedAt)
		return key, row
	}

	// abandonOld abandons a request an hour ago.
	abandonOld := func(t *testing.T, b *testBundle, failpoint string) (key string, row *idem.Key) {
		t.Helper()
		key, row = abandon(t, b, failpoint)
		backdate(t, b, row.ID, time.Hour, time.Hour)
		return key, row
	}

	// requireCompleted checks the invariant the completer exists for: the
	// key finished with a stored 201, the customer was charged exactly
	// once, and the ride records that charge.
	requireCompleted := func(t *testing.T, b *testBundle, key string) {
		t.Helper()
		row := b.KeyRow(t, key)
		require.Equal(t, idem.Finished, row.RecoveryPoint)
		require.Equal(t, http.StatusCreated, *row.ResponseCode)
		require.Nil(t, row.LockedAt)
		charges := b.ChargesFor(row.ID)
		require.Len(t, charges, 1, "charges for key %d", row.ID)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides WHERE idempotency_key_id = $1 AND stripe_charge_id = $2`,
			row.ID, charges[0].ID))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM staged_jobs WHERE job_args->>'stripe_charge_id' = $1`, charges[0].ID))
	}

	// requireUntouched checks that the completer left key as it was.
	requireUntouched := func(t *testing.T, b *testBundle, key string, before *idem.Key) {
		t.Helper()
		after := b.KeyRow(t, key)
		require.Equal(t, before.RecoveryPoint, after.RecoveryPoint)
		require.Equal(t, before.LockToken, after.LockToken)
		require.Empty(t, b.ChargesFor(before.ID))
	}

	for _, tc := range []struct {
		name      string
		failpoint string
		stoppedAt idem.RecoveryPoint
	}{
		{"CompletesFromStarted", rides.FailAfterClaim, idem.Started},
		{"CompletesFromRideCreated", rides.FailAfterRideCreated, rides.RideCreated},
		{"CompletesFromRideCreatedBeforeCharge", rides.FailBeforeCharge, rides.RideCreated},
		{"CompletesFromChargeCreated", rides.FailAfterChargeCreated, rides.ChargeCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			key, row := abandonOld(t, b, tc.failpoint)
			require.Equal(t, tc.stoppedAt, row.RecoveryPoint)

			succeeded, failed := runOnce(t, b)
			require.Equal(t, 1, succeeded)
			require.Zero(t, failed)
			requireCompleted(t, b, key)
			require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides`))
			require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records`))

			// The client that does come back gets the stored ride.
			resp := b.PostRide(t, key, apitest.DefaultParams)
			require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
			require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
			require.Equal(t, string(b.KeyRow(t, key).ResponseBody), string(resp.Body))
			require.Len(t, b.ChargesFor(row.ID), 1)

			// Nothing left to do.
			succeeded, failed = runOnce(t, b)
			require.Zero(t, succeeded+failed)
		})
	}

	// The contract's promise after a 5xx: a client that never retries
	// finds its ride settled by the server within
	// DefaultSettleWithin of its last attempt, by the completer on its
	// default settings.
	t.Run("SettlesThePendingRideOfA5xxWithinThePromise", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		b.Fail(rides.FailBeforeCharge, func(context.Context) error { return errors.New("injected failure") })
		resp := b.PostRide(t, key, apitest.DefaultParams)
		b.Fail(rides.FailBeforeCharge, nil)
		require.Equal(t, http.StatusInternalServerError, resp.Status, "%s", resp.Body)
		rideID := resp.JSON(t)["ride_id"]
		require.NotNil(t, rideID, "the 5xx names the ride: %s", resp.Body)
		getRide := func() map[string]any {
			got := b.Do(t, http.MethodGet, fmt.Sprintf("/rides/%v", rideID), "", "Authorization", "Bearer "+b.Token)
			require.Equal(t, http.StatusOK, got.Status, "%s", got.Body)
			return got.JSON(t)
		}
		require.Equal(t, "pending", getRide()["status"])

		// Just short of the promise's margin: the poll interval.
		promise := completer.DefaultSettleWithin - completer.DefaultPollInterval
		backdate(t, b, b.KeyRow(t, key).ID, promise, promise)
		succeeded, failed := runOnce(t, b)
		require.Equal(t, 1, succeeded)
		require.Zero(t, failed)
		require.Equal(t, "succeeded", getRide()["status"])
		requireCompleted(t, b, key)
	})

	t.Run("StoredDeclineCountsAsSucceeded", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		b.Fail(rides.FailAfterClaim, func(context.Context) error { return errors.New("injected failure") })
		resp := b.Do(t, http.MethodPost, "/rides", apitest.DefaultParams,
			"Authorization", "Bearer "+b.BadSourceToken, "Idempotency-Key", key,
			"Content-Type", "application/x-www-form-urlencoded")
		b.Fail(rides.FailAfterClaim, nil)
		require.Equal(t, http.StatusInternalServerError, resp.Status, "%s", resp.Body)
		var keyID int64
		require.NoError(t, b.Pool.QueryRow(context.Background(),
			`SELECT id FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2`, b.BadSourceUser.ID, key,
		).Scan(&keyID))
		backdate(t, b, keyID, time.Hour, time.Hour)

		succeeded, failed := runOnce(t, b)
		require.Equal(t, 1, succeeded, "a stored decline is a finished request")
		require.Zero(t, failed)
		var (
			point idem.RecoveryPoint
			code  int
		)
		require.NoError(t, b.Pool.QueryRow(context.Background(),
			`SELECT recovery_point, response_code FROM idempotency_keys WHERE id = $1`, keyID).Scan(&point, &code))
		require.Equal(t, idem.Finished, point)
		require.Equal(t, http.StatusPaymentRequired, code)
		require.Empty(t, b.ChargesFor(keyID))
	})

	t.Run("InternalErrorCountsAsFailureAndKeepsProgress", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key, row := abandonOld(t, b, rides.FailAfterClaim)
		require.Equal(t, idem.Started, row.RecoveryPoint)
		b.Fail(rides.FailBeforeCharge, func(context.Context) error { return errors.New("boom") })

		succeeded, failed := runOnce(t, b)
		require.Zero(t, succeeded)
		require.Equal(t, 1, failed)
		row = b.KeyRow(t, key)
		require.Equal(t, rides.RideCreated, row.RecoveryPoint, "the phases before the failure committed")
		require.Nil(t, row.LockedAt, "the key was unlocked")
		require.Nil(t, row.LockToken)
		require.Nil(t, row.ResponseCode, "an internal error is not stored")
		require.Zero(t, b.Stripe.Stats().ChargeRequests)

		// It waits out the retry interval, then finishes once fixed.
		succeeded, failed = runOnce(t, b)
		require.Zero(t, succeeded+failed)
		b.Fail(rides.FailBeforeCharge, nil)
		backdate(t, b, row.ID, time.Hour, time.Hour)
		succeeded, failed = runOnce(t, b)
		require.Equal(t, 1, succeeded)
		require.Zero(t, failed)
		requireCompleted(t, b, key)
	})

	// It used to log "it will be retried" for a key it had just set aside,
	// which no completer takes again until a person settles it.
	t.Run("SaysItLeavesAKeyItSetsAside", func(t *testing.T) {
		t.Parallel()
		stack := apitest.New(t, apitest.Options{MaxChargeAttempts: 1})
		var logs bytes.Buffer
		c, err := completer.New(&completer.Config{Keys: stack.Keys, Service: stack.Service, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err)
		b := &testBundle{Stack: stack, completer: c}
		key, row := abandonOld(t, b, rides.FailBeforeCharge)
		require.Equal(t, rides.RideCreated, row.RecoveryPoint)
		b.Stripe.SetFaults(fakestripe.Faults{StoreFailureNext: 1})

		succeeded, failed := runOnce(t, b)
		require.Zero(t, succeeded)
		require.Equal(t, 1, failed)
		require.NotNil(t, b.KeyRow(t, key).AttentionReason, "set aside")
		require.Contains(t, logs.String(), "set_aside=true")
		require.NotContains(t, logs.String(), "retried")
	})

	t.Run("OneFailureDoesNotStopTheBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first, _ := abandonOld(t, b, rides.FailAfterClaim)
		second, _ := abandonOld(t, b, rides.FailAfterClaim)
		var once sync.Once
		b.Fail(rides.FailBeforeCharge, func(context.Context) error {
			err := error(nil)
			once.Do(func() { err = errors.New("boom") })
			return err
		})

		succeeded, failed := runOnce(t, b)
		require.Equal(t, 1, succeeded)
		require.Equal(t, 1, failed)
		// The keys are worked side by side; whichever came to the
		// failpoint first stopped, and the other finished.
		stopped, finished := first, second
		if b.KeyRow(t, first).RecoveryPoint == idem.Finished {
			stopped, finished = second, first
		}
		require.Equal(t, rides.RideCreated, b.KeyRow(t, stopped).RecoveryPoint)
		require.Nil(t, b.KeyRow(t, stopped).LockedAt, "the failed key is left unlocked")
		requireCompleted(t, b, finished)
	})

	t.Run("IgnoresYoungKeys", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key, row := abandon(t, b, rides.FailAfterClaim)
		backdate(t, b, row.ID, time.Minute, time.Hour)

		succeeded, failed := runOnce(t, b)
		require.Zero(t, succeeded+failed)
		requireUntouched(t, b, key, row)
	})

	t.Run("IgnoresRecentlyRunKeys", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key, row := abandon(t, b, rides.FailAfterClaim)
		backdate(t, b, row.ID, time.Hour, 10*time.Second)

		succeeded, failed := runOnce(t, b)
		require.Zero(t, succeeded+failed)
		requireUntouched(t, b, key, row)
	})

	t.Run("IgnoresFinishedKeys", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		row := b.KeyRow(t, key)
		backdate(t, b, row.ID, time.Hour, time.Hour)

		succeeded, failed := runOnce(t, b)
		require.Zero(t, succeeded+failed)
		require.Equal(t, 1, b.Stripe.Stats().ChargeRequests)
		require.Equal(t, string(row.ResponseBody), string(b.KeyRow(t, key).ResponseBody))
	})

	t.Run("IgnoresKeysWithALiveLock", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A request working the key right now.
		key := apitest.NewKey()
		row := b.Claim(t, key)
		backdate(t, b, row.ID, time.Hour, time.Hour)

		succeeded, failed := runOnce(t, b)
		require.Zero(t, succeeded+failed)
		requireUntouched(t, b, key, row)
	})

	t.Run("IgnoresKeysSetAsideForAttention", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key, row := abandonOld(t, b, rides.FailBeforeCharge)
		_, err := b.Pool.Exec(context.Background(),
			`UPDATE idempotency_keys SET attention_reason = 'charge outcome unknown' WHERE id = $1`, row.ID)
		require.NoError(t, err)

		succeeded, failed := runOnce(t, b)
		require.Zero(t, succeeded+failed)
		requireUntouched(t, b, key, row)
	})

	t.Run("TakesKeysWithAStaleLock", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A request that died holding the key.
		client := apitest.NewKey()
		stalled := b.Claim(t, client)
		backdate(t, b, stalled.ID, time.Hour, time.Hour)
		_, err := b.Pool.Exec(context.Background(),
			`UPDATE idempotency_keys SET locked_at = now() - $2::interval WHERE id = $1`,
			stalled.ID, 2*b.Keys.LockTimeout())
		require.NoError(t, err)

		succeeded, failed := runOnce(t, b)
		require.Equal(t, 1, succeeded)
		require.Zero(t, failed)
		requireCompleted(t, b, client)
	})

	t.Run("EmptyDatabase", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		succeeded, failed := runOnce(t, b)
		require.Zero(t, succeeded)
		require.Zero(t, failed)
	})

	// Two completer processes, each with its own store and service,
	// share the work without ever resuming the same key twice.
	t.Run("ConcurrentCompletersFinishEachKeyOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n = 20
		keys := make([]string, n)
		for i := range keys {
			keys[i], _ = abandon(t, b, rides.FailAfterClaim)
		}
		_, err := b.Pool.Exec(context.Background(),
			`UPDATE idempotency_keys SET created_at = now() - interval '1 hour', last_run_at = now() - interval '1 hour'`)
		require.NoError(t, err)

		otherKeys, err := idem.New(&idem.Config{Pool: b.Pool})
		require.NoError(t, err)
		otherService, err := rides.NewService(&rides.ServiceConfig{Pool: b.Pool, Keys: otherKeys, Payments: b.Gateway})
		require.NoError(t, err)
		completers := []*completer.Completer{
			newCompleter(t, b.Keys, b.Service, completer.Config{BatchSize: 3}),
			newCompleter(t, otherKeys, otherService, completer.Config{BatchSize: 3}),
		}
		var (
			wg                sync.WaitGroup
			mu                sync.Mutex
			succeeded, failed int
			start             = make(chan struct{})
		)
		for _, c := range completers {
			wg.Go(func() {
				<-start
				for {
					s, f, err := c.RunOnce(context.Background())
					mu.Lock()
					succeeded, failed = succeeded+s, failed+f
					mu.Unlock()
					if err != nil {
						t.Errorf("RunOnce: %v", err)
						return
					}
					if s+f == 0 {
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()

		require.Equal(t, n, succeeded)
		require.Zero(t, failed)
		require.Equal(t, n, b.Stripe.Stats().ChargeRequests, "each key resumed by exactly one completer")
		for _, key := range keys {
			requireCompleted(t, b, key)
		}
		require.Equal(t, n, b.Count(t, `SELECT count(*) FROM rides`))
		require.Equal(t, n, b.Count(t, `SELECT count(*) FROM audit_records`))
	})

	t.Run("ShutdownFinishesKeyInHandAndReleasesTheRest", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// One key in hand at a time, so that one is still waiting when
		// the shutdown comes.
		b.completer = newCompleter(t, b.Keys, b.Service, completer.Config{Concurrency: 1})
		first, firstRow := abandon(t, b, rides.FailAfterClaim)
		second, secondRow := abandon(t, b, rides.FailAfterClaim)
		backdate(t, b, firstRow.ID, 2*time.Hour, 2*time.Hour)
		backdate(t, b, secondRow.ID, time.Hour, time.Hour)

		// The shutdown arrives while the first key is being charged.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		b.Fail(rides.FailBeforeCharge, func(context.Context) error { cancel(); return nil })

		succeeded, failed, err := b.completer.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, succeeded)
		require.Zero(t, failed)
		requireCompleted(t, b, first)
		row := b.KeyRow(t, second)
		require.Equal(t, idem.Started, row.RecoveryPoint)
		require.Nil(t, row.LockedAt, "released unworked, not left locked")
	})

	t.Run("WorksTheKeysOfABatchConcurrently", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n = 8
		keys := make([]string, n)
		for i := range keys {
			keys[i], _ = abandonOld(t, b, rides.FailAfterRideCreated)
		}
		// Each key's charge waits until every key of the batch has come to
		// its own: one at a time, the first would wait alone and fail.
		var reached atomic.Int32
		all := make(chan struct{})
		bound, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		b.Fail(rides.FailBeforeCharge, func(context.Context) error {
			if reached.Add(1) == n {
				close(all)
			}
			select {
			case <-all:
				return nil
			case <-bound.Done():
				return errors.New("the batch's other keys never came to their charge")
			}
		})

		succeeded, failed, err := b.completer.RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, n, succeeded, "the batch's charges overlapped")
		require.Zero(t, failed)
		for _, key := range keys {
			requireCompleted(t, b, key)
		}
		require.Equal(t, n, b.Stripe.Stats().ChargeRequests, "one charge request per key (the clients failed before theirs)")
	})

	t.Run("RunCompletesUntilCancelled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.completer = newCompleter(t, b.Keys, b.Service, completer.Config{PollInterval: 20 * time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- b.completer.Run(ctx) }()

		key, _ := abandonOld(t, b, rides.FailAfterRideCreated)
		require.Eventually(t, func() bool {
			var point idem.RecoveryPoint
			err := b.Pool.QueryRow(context.Background(),
				`SELECT recovery_point FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2`,
				b.User.ID, key).Scan(&point)
			return err == nil && point == idem.Finished
		}, time.Minute, 20*time.Millisecond)
		requireCompleted(t, b, key)

		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after cancellation")
		}
	})

	t.Run("RejectsNegativeConfig", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for field, config := range map[string]completer.Config{
			"MinAge":        {MinAge: -time.Second},
			"RetryInterval": {RetryInterval: -time.Second},
			"PollInterval":  {PollInterval: -time.Second},
			"BatchSize":     {BatchSize: -1},
			"Concurrency":   {Concurrency: -1},
		} {
			config.Keys, config.Service = b.Keys, b.Service
			_, err := completer.New(&config)
			require.ErrorContains(t, err, "completer: Config."+field+" must not be negative")
		}
	})

	t.Run("RequiresKeysAndService", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := completer.New(nil)
		require.ErrorContains(t, err, "completer: Config is required")
		_, err = completer.New(&completer.Config{Service: b.Service})
		require.ErrorContains(t, err, "completer: Config.Keys is required")
		_, err = completer.New(&completer.Config{Keys: b.Keys})
		require.ErrorContains(t, err, "completer: Config.Service is required")
	})
}
