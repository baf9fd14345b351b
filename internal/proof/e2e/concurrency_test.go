package e2e_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet/fleettest"
	"github.com/rocketrides/rocketrides/internal/testkit/invariant"
)

// TestConcurrencyAcrossProcesses races requests with the same key against
// three api processes sharing one database and one Stripe. Nothing but
// Postgres arbitrates between them: the claim's INSERT ... ON CONFLICT and
// row lock, and the fenced phases.
func TestConcurrencyAcrossProcesses(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		*stack
		urls   []string // one per api process
		client *client
	}
	setup := func(t *testing.T, env ...string) *testBundle {
		t.Helper()
		b := &testBundle{stack: newStack(t, dbtest.NewURL(t))}
		for range 3 {
			b.urls = append(b.urls, fleettest.Start(t, b.fleet, "api", env...).URL)
		}
		b.client = newClient(b.token, 30*time.Second)
		return b
	}

	// On both of the key store's paths: the claim's one statement, and the
	// plain INSERT ... ON CONFLICT then SELECT ... FOR UPDATE.
	t.Run("OneKeyFromFiftyClientsChargesOnce", func(t *testing.T) {
		t.Parallel()
		for _, pipeline := range []string{"on", "off"} {
			t.Run("Pipeline"+pipeline, func(t *testing.T) {
				t.Parallel()
				b := setup(t, idem.Pipeline+"="+pipeline)
				key := uuid.NewString()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()

				replies := make([]reply, 50)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i := range replies {
					wg.Go(func() {
						<-start
						replies[i] = b.client.postRide(ctx, b.urls[i%len(b.urls)], key)
					})
				}
				close(start)
				wg.Wait()

				var fresh []reply
				counts := map[string]int{}
				for _, r := range replies {
					require.NoError(t, r.Err)
					switch {
					case r.fresh():
						fresh = append(fresh, r)
						counts["201"]++
					case r.Status == http.StatusCreated && r.Replayed:
						counts["201 replayed"]++
					case r.Status == http.StatusConflict:
						counts["409"]++
					default:
						t.Fatalf("only 201, a replayed 201 or 409 may answer a duplicate: %s", r)
					}
				}
				t.Logf("answers: %v", counts)
				require.Len(t, fresh, 1, "exactly one request runs")
				for _, r := range replies {
					if r.Status == http.StatusCreated {
						require.Equal(t, string(fresh[0].Body), string(r.Body), "a replay is the winner's answer")
					}
				}
				report := b.check(t, invariant.Options{})
				require.Equal(t, 1, report.Keys)
				require.Equal(t, 1, report.Charges)
				require.Equal(t, 1, b.stripeStats(t)["charge_requests"], "the losers never reach Stripe")
			})
		}
	})

	t.Run("ManyKeysSentTwiceChargeOncePerKey", func(t *testing.T) {
		t.Parallel()
		// A load: 200 charges for one user, past the charge cap by design.
		b := setup(t, "RATE_LIMITS=off")
		const (
			keys    = 200
			workers = 16 // each with a key in flight twice: 32 requests at once
		)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()

		type outcome struct {
			key     string
			replies [2][]reply
			errs    [2]error
		}
		outcomes := make([]outcome, keys)
		next := make(chan int)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for k := range next {
					o := &outcomes[k]
					o.key = uuid.NewString()
					// An impatient client: the same key twice at once, to
					// two different instances, each attempt retried until
					// it gets a final answer.
					var pair sync.WaitGroup
					for a := range 2 {
						pair.Go(func() {
							o.replies[a], o.errs[a] = b.client.retryUntilFinal(ctx,
								[]string{b.urls[(k+a)%len(b.urls)], b.urls[(k+a+1)%len(b.urls)]}, o.key)
						})
					}
					pair.Wait()
				}
			})
		}
		for k := range keys {
			next <- k
		}
		close(next)
		wg.Wait()

		counts := map[string]int{}
		for _, o := range outcomes {
			fresh := 0
			for a := range 2 {
				require.NoError(t, o.errs[a])
				for _, r := range o.replies[a] {
					require.NoError(t, r.Err)
					counts[http.StatusText(r.Status)]++
					if r.fresh() {
						fresh++
					}
				}
				final := o.replies[a][len(o.replies[a])-1]
				require.Equal(t, http.StatusCreated, final.Status, "key %s: %s", o.key, final)
			}
			require.Equal(t, 1, fresh, "key %s ran once", o.key)
		}
		t.Logf("answers: %v", counts)
		report := b.check(t, invariant.Options{})
		require.Equal(t, keys, report.KeysCreated)
		require.Equal(t, keys, report.Charges)
		require.Equal(t, keys, b.stripeStats(t)["charges"])
	})
}
