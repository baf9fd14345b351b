package e2e_test

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet/fleettest"
	"github.com/rocketrides/rocketrides/internal/testkit/invariant"
)

// scratchCluster starts a Postgres cluster of the test's own, in a
// localpg.ScratchDir, on a free port. Restarting or stopping it touches no
// other test: the shared test cluster must never be restarted. It is
// stopped and deleted when the test ends.
func scratchCluster(t *testing.T) localpg.Cluster {
	t.Helper()
	dir, err := localpg.ScratchDir("dbfault")
	require.NoError(t, err)
	port, err := fleet.FreePort()
	require.NoError(t, err)
	opts := localpg.Options{DataDir: dir, Port: port}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := localpg.Ensure(ctx, opts)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Remove(ctx); err != nil {
			t.Errorf("remove scratch cluster: %v", err)
		}
	})
	require.NoError(t, err)
	return c
}

// readiness records the answers of an api's GET /readyz, collapsing
// repeats: [200 503 200] is a database that went away and came back.
type readiness struct {
	mu      sync.Mutex
	changes []int
	stop    chan struct{}
	done    chan struct{}
}

func watchReadiness(url string) *readiness {
	r := &readiness{stop: make(chan struct{}), done: make(chan struct{})}
	// /readyz bounds its own check at 2s: no answer (0) means it hung. The
	// client's bound is the margin a loaded machine needs above that.
	client := &http.Client{Timeout: 15 * time.Second}
	go func() {
		defer close(r.done)
		for {
			status := 0 // no answer at all
			if resp, err := client.Get(url + "/readyz"); err == nil {
				status = resp.StatusCode
				resp.Body.Close()
			}
			r.mu.Lock()
			if len(r.changes) == 0 || r.changes[len(r.changes)-1] != status {
				r.changes = append(r.changes, status)
			}
			r.mu.Unlock()
			select {
			case <-r.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return r
}

// Last is /readyz's latest answer, 0 before the first.
func (r *readiness) Last() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.changes) == 0 {
		return 0
	}
	return r.changes[len(r.changes)-1]
}

// Seen reports whether /readyz has answered status so far.
func (r *readiness) Seen(status int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.changes, status)
}

func (r *readiness) Stop() []int {
	close(r.stop)
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.changes)
}

// TestDatabaseFaults takes the key store away from a running api: a
// restart of Postgres under load, then Postgres stopped outright. The api
// keeps running, answers promptly with 5xx instead of hanging, never
// calls Stripe without a committed claim, and every key its clients keep
// retrying finishes with exactly one charge once Postgres is back.
func TestDatabaseFaults(t *testing.T) {
	t.Parallel()

	// A short lock timeout: a request cut off by the restart may fail to
	// unlock its key, and its retry must not wait 90s. The api has no
	// deadline of its own here, so a hung request would wait forever:
	// clientTimeout tells one apart with a margin no loaded machine uses.
	const (
		lockTimeout   = 2 * time.Second // STRIPE_TIMEOUT=1s ends within it
		clientTimeout = 30 * time.Second
	)
	cluster := scratchCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, cluster.CreateDatabase(ctx, "rocketrides"))
	dbURL := cluster.DatabaseURL("rocketrides")
	require.NoError(t, db.MigrateUp(ctx, dbURL, slog.New(slog.DiscardHandler)))

	s := newStack(t, dbURL)
	s.fleet.AddEnv("IDEMPOTENCY_LOCK_TIMEOUT="+lockTimeout.String(), "STRIPE_TIMEOUT=1s",
		// A load, of one token's rides: past the rate limits by design.
		"RATE_LIMITS=off")
	api := fleettest.Start(t, s.fleet, "api")
	c := newClient(s.token, clientTimeout)

	// The subtests share the cluster and run in order, each on the state
	// the one before left behind.

	t.Run("RestartUnderLoadFailsCleanlyAndRecovers", func(t *testing.T) {
		// /readyz's first answer comes before the load, so that it is the
		// green of a quiet api, not a check slowed by the load.
		ready := watchReadiness(api.URL)
		waitFor(t, time.Minute, "/readyz's first answer", func() bool { return ready.Last() != 0 })
		var (
			mu      sync.Mutex
			keys    []string
			replies []reply
			errs    []error
			wg      sync.WaitGroup
		)
		stopNew := make(chan struct{})
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stopNew:
						return
					default:
					}
					key := uuid.NewString()
					keyCtx, cancel := context.WithTimeout(ctx, 45*time.Second)
					rs, err := c.retryUntilFinal(keyCtx, []string{api.URL}, key)
					cancel()
					mu.Lock()
					keys = append(keys, key)
					replies = append(replies, rs...)
					if err != nil {
						errs = append(errs, err)
					}
					mu.Unlock()
				}
			})
		}

		// Postgres goes away under the load, and stays away until the api
		// has said so and a request has run into it: a restart over before
		// either happened would prove nothing, and on a busy machine it
		// could be. Then it comes back, and stays until /readyz says so.
		time.Sleep(time.Second)
		require.NoError(t, cluster.Stop(ctx))
		require.Eventually(t, func() bool { return ready.Seen(http.StatusServiceUnavailable) },
			time.Minute, 20*time.Millisecond, "/readyz goes red while Postgres is down")
		probe := uuid.NewString()
		down := c.postRide(ctx, api.URL, probe)
		require.Contains(t, []int{http.StatusInternalServerError, http.StatusServiceUnavailable}, down.Status,
			"a request while Postgres is down: %s", down)
		require.NoError(t, cluster.Start(ctx))
		require.Eventually(t, func() bool { return ready.Last() == http.StatusOK },
			time.Minute, 20*time.Millisecond, "/readyz is green again once Postgres is back")
		close(stopNew)
		wg.Wait()
		changes := ready.Stop()
		probeCtx, cancelProbe := context.WithTimeout(ctx, 45*time.Second)
		rs, err := c.retryUntilFinal(probeCtx, []string{api.URL}, probe)
		cancelProbe()
		require.NoError(t, err, "the key that ran into the outage finishes")
		keys, replies = append(keys, probe), append(append(replies, down), rs...)

		require.Empty(t, errs, "every key finishes")
		failed := 0
		for _, r := range replies {
			require.NoError(t, r.Err, "the api keeps running and answers: %s", r)
			require.Less(t, r.Took, clientTimeout, "%s", r)
			require.Contains(t, []int{http.StatusCreated, http.StatusConflict, http.StatusInternalServerError, http.StatusServiceUnavailable},
				r.Status, "%s", r)
			if r.Status != http.StatusCreated {
				failed++
			}
		}
		t.Logf("%d keys, %d requests, %d answered 409 or 5xx; /readyz went %v", len(keys), len(replies), failed, changes)
		require.Positive(t, failed, "some requests ran into the outage")
		require.Equal(t, http.StatusOK, changes[0], "/readyz: %v", changes)
		require.Greater(t, len(changes), 2, "/readyz goes red during the outage: %v", changes)
		require.NotContains(t, changes, 0, "/readyz always answers: %v", changes)
		require.Equal(t, http.StatusOK, changes[len(changes)-1], "/readyz: %v", changes)

		report := s.check(t, invariant.Options{LockTimeout: lockTimeout})
		require.Equal(t, len(keys), report.KeysCreated)
		require.Equal(t, len(keys), report.Charges)
	})

	t.Run("KeyStoreDownFailsClosed", func(t *testing.T) {
		// A key left at ride_created, as after a request that failed
		// before its charge: the next attempt would charge.
		failing := fleettest.Start(t, s.fleet, "api", "FAILPOINTS="+rides.FailBeforeCharge+"=error")
		started := uuid.NewString()
		r := c.postRide(ctx, failing.URL, started)
		require.Equal(t, http.StatusInternalServerError, r.Status, "%s", r)
		require.NoError(t, failing.Stop(ctx))
		row := s.keyRow(t, started)
		require.Equal(t, "ride_created", row.RecoveryPoint)
		require.False(t, row.Locked)

		chargeRequests := s.stripeStats(t)["charge_requests"]
		require.NoError(t, cluster.Stop(ctx))

		ready := watchReadiness(api.URL)
		keys := []string{started, uuid.NewString(), uuid.NewString(), uuid.NewString()}
		for _, key := range keys {
			r := c.postRide(ctx, api.URL, key)
			require.NoError(t, r.Err, "the api answers without its database: %s", r)
			require.GreaterOrEqual(t, r.Status, 500, "%s", r)
			require.Less(t, r.Took, clientTimeout, "%s", r)
		}
		require.Equal(t, chargeRequests, s.stripeStats(t)["charge_requests"],
			"no Stripe call without a committed claim: fail closed")

		// On a loaded machine the watcher's first look may come late: the
		// database comes back only once /readyz has said it was gone.
		waitFor(t, time.Minute, "/readyz to report the database gone", func() bool {
			return ready.Seen(http.StatusServiceUnavailable)
		})
		require.NoError(t, cluster.Start(ctx))
		waitFor(t, time.Minute, "/readyz to recover", func() bool {
			resp, err := http.Get(api.URL + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
		require.Equal(t, []int{http.StatusServiceUnavailable, http.StatusOK}, ready.Stop()[:2])

		for _, key := range keys {
			keyCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			rs, err := c.retryUntilFinal(keyCtx, []string{api.URL}, key)
			cancel()
			require.NoError(t, err)
			final := rs[len(rs)-1]
			require.Equal(t, http.StatusCreated, final.Status, "%s", final)
			require.False(t, final.Replayed, "%s", final)
		}
		report := s.check(t, invariant.Options{LockTimeout: lockTimeout})
		require.Equal(t, report.Keys, report.KeysCreated)
		require.Equal(t, chargeRequests+len(keys), s.stripeStats(t)["charge_requests"], "one charge request per key")
	})
}
