package e2e_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet/fleettest"
	"github.com/rocketrides/rocketrides/internal/testkit/invariant"
)

// TestCrashRecovery crashes the api process (SIGKILL, from inside, at a
// failpoint) at every seam of a ride request and shows that either way
// of picking the request up again, the client's retry with the same key
// or the completer, finishes it with exactly one charge and one receipt,
// on both of the key store's paths (IDEMPOTENCY_PIPELINE on and off).
func TestCrashRecovery(t *testing.T) {
	t.Parallel()

	// A short lock timeout lets the retry take over the dead request's
	// lock within the test, as it would after 90s in production: 2s, so
	// that a Stripe attempt (STRIPE_TIMEOUT=1s) ends within it.
	const lockTimeout = 2 * time.Second

	type testBundle struct {
		*stack
		api    *fleet.Process
		client *client
		key    string
	}

	// setup runs a request into a crash at seam: the api kills itself
	// there, the client loses its connection without an answer, and the
	// api is restarted without failpoints, as a supervisor would.
	setup := func(t *testing.T, pipeline, seam string) *testBundle {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s := newStack(t, dbtest.NewURL(t))
		s.fleet.AddEnv("IDEMPOTENCY_LOCK_TIMEOUT="+lockTimeout.String(), "STRIPE_TIMEOUT=1s", idem.Pipeline+"="+pipeline)
		b := &testBundle{
			stack:  s,
			api:    fleettest.Start(t, s.fleet, "api", "FAILPOINTS="+seam+"=kill"),
			client: newClient(s.token, 15*time.Second),
			key:    uuid.NewString(),
		}

		r := b.client.postRide(ctx, b.api.URL, b.key)
		require.True(t, isConnectionLost(r.Err), "the client must lose its connection, got %s", r)
		require.ErrorContains(t, b.api.Wait(ctx), "signal: killed")
		require.Contains(t, b.api.Log(), "failpoint "+seam+": killing process")
		require.NoError(t, b.api.Restart(ctx, "FAILPOINTS="))
		return b
	}

	// crashedAt is where each seam leaves the key: the last recovery point
	// committed before the crash, still locked by the dead request unless
	// it had finished.
	crashedAt := map[string]string{
		rides.FailAfterClaim:         "started",
		rides.FailAfterRideCreated:   "ride_created",
		rides.FailBeforeCharge:       "ride_created",
		rides.FailAfterCharge:        "ride_created", // charged at Stripe, not recorded
		rides.FailInRecordCharge:     "ride_created", // killed inside the transaction: rolled back
		rides.FailAfterChargeCreated: "charge_created",
		rides.FailAfterFinished:      "finished",
		rides.FailBeforeResponse:     "finished",
	}
	// finished reports whether the seam comes after the last phase, so
	// that the request only lost its answer.
	finished := func(seam string) bool {
		return seam == rides.FailAfterFinished || seam == rides.FailBeforeResponse
	}
	// charged reports whether the seam comes after the charge at Stripe.
	charged := func(seam string) bool {
		return seam != rides.FailAfterClaim && seam != rides.FailAfterRideCreated && seam != rides.FailBeforeCharge
	}

	requireCrashState := func(t *testing.T, b *testBundle, seam string) {
		t.Helper()
		row := b.keyRow(t, b.key)
		require.Equal(t, crashedAt[seam], row.RecoveryPoint)
		require.Equal(t, !finished(seam), row.Locked, "the dead request still holds the lock")
		wantCharges := 0
		if charged(seam) {
			wantCharges = 1
		}
		require.Equal(t, wantCharges, b.stripeStats(t)["charges"])
	}

	// requireOneChargeAndReceipt drains the receipts and checks the
	// promise: one charge, on the ride, one receipt.
	requireOneChargeAndReceipt := func(t *testing.T, b *testBundle) {
		t.Helper()
		row := b.keyRow(t, b.key)
		require.Equal(t, "finished", row.RecoveryPoint)
		require.Equal(t, http.StatusCreated, *row.ResponseCode)
		require.False(t, row.Locked)

		mailDir := t.TempDir()
		enqueued, worked := b.drainReceipts(t, mailDir)
		require.Equal(t, "enqueued=1", enqueued)
		require.Equal(t, "worked=1", worked)
		require.Len(t, mails(t, mailDir), 1)

		report := b.check(t, invariant.Options{ReceiptsDrained: true, LockTimeout: lockTimeout})
		require.Equal(t, 1, report.KeysCreated)
		require.Equal(t, 1, report.Charges)
		require.Equal(t, 1, report.Receipts)
		require.Equal(t, 1, b.stripeStats(t)["charges"])
	}

	// Every seam on the fast path, the default. The plain path differs
	// from it only in how a claim and a phase go to Postgres, so it is
	// killed at the seams around its phases (internal/rides's crash
	// matrix, in process, takes it through every seam).
	seams := []string{
		rides.FailAfterClaim,
		rides.FailAfterRideCreated,
		rides.FailBeforeCharge,
		rides.FailAfterCharge,
		rides.FailInRecordCharge,
		rides.FailAfterChargeCreated,
		rides.FailAfterFinished,
		rides.FailBeforeResponse,
	}
	for _, path := range []struct {
		name, pipeline string
		seams          []string
	}{
		{"Fast", "on", seams},
		{"Plain", "off", []string{rides.FailAfterRideCreated, rides.FailInRecordCharge, rides.FailAfterChargeCreated}},
	} {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			for _, seam := range path.seams {
				t.Run(seam, func(t *testing.T) {
					t.Parallel()

					t.Run("ClientRetryFinishesItOnce", func(t *testing.T) {
						t.Parallel()
						b := setup(t, path.pipeline, seam)
						requireCrashState(t, b, seam)
						ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						defer cancel()

						replies, err := b.client.retryUntilFinal(ctx, []string{b.api.URL}, b.key)
						require.NoError(t, err)
						for _, r := range replies[:len(replies)-1] {
							require.Equal(t, http.StatusConflict, r.Status, "only the dead request's lock delays the retry: %s", r)
						}
						final := replies[len(replies)-1]
						require.Equal(t, http.StatusCreated, final.Status, "%s", final)
						// A request that had finished before the crash is replayed.
						require.Equal(t, finished(seam), final.Replayed, "%s", final)

						again := b.client.postRide(ctx, b.api.URL, b.key)
						require.Equal(t, http.StatusCreated, again.Status, "%s", again)
						require.True(t, again.Replayed)
						require.Equal(t, string(final.Body), string(again.Body), "the replay is byte for byte")

						requireOneChargeAndReceipt(t, b)
					})

					t.Run("CompleterFinishesItOnce", func(t *testing.T) {
						t.Parallel()
						b := setup(t, path.pipeline, seam)
						requireCrashState(t, b, seam)
						// The completer leaves a live lock alone; the dead request's
						// lock goes stale after the lock timeout.
						waitFor(t, 10*time.Second, "the dead request's lock to go stale", func() bool {
							var stale bool
							require.NoError(t, b.pool.QueryRow(context.Background(), `
						SELECT locked_at IS NULL OR locked_at < now() - make_interval(secs => $2)
						FROM idempotency_keys WHERE idempotency_key = $1`, b.key, lockTimeout.Seconds()).Scan(&stale))
							return stale
						})

						out := fleettest.Run(t, b.fleet, "completer",
							[]string{"COMPLETER_MIN_AGE=1ms", "COMPLETER_RETRY_INTERVAL=1ms"}, "-once")
						want := "succeeded=1 failed=0"
						if finished(seam) {
							want = "succeeded=0 failed=0" // finished already: nothing to complete
						}
						require.Equal(t, want, out)

						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						r := b.client.postRide(ctx, b.api.URL, b.key)
						require.Equal(t, http.StatusCreated, r.Status, "%s", r)
						require.True(t, r.Replayed, "the client that comes back gets the completer's answer")

						requireOneChargeAndReceipt(t, b)
					})
				})
			}
		})
	}
}
