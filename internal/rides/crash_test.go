package rides_test

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/completer"
	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

// TestCrashMatrix crashes a request at every seam of the DAG and recovers
// it both ways the design allows: the client retries with the same key, or
// the completer finishes it. A crash is the request's goroutine ending on
// the spot (runtime.Goexit): no error handling runs, the key keeps its
// lock until the lock goes stale, exactly as if the process had died.
// (internal/proof/e2e repeats the matrix with real processes and SIGKILL.)
// The matrix runs on both of the key store's paths, the fast one and the
// plain one, which must recover alike.
func TestCrashMatrix(t *testing.T) {
	t.Parallel()
	for _, path := range []struct {
		name  string
		plain bool
	}{{"Fast", false}, {"Plain", true}} {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			testCrashMatrix(t, path.plain)
		})
	}
}

func testCrashMatrix(t *testing.T, plain bool) {
	const lockTimeout = 300 * time.Millisecond
	seams := []string{
		rides.FailAfterClaim,
		rides.FailAfterRideCreated,
		rides.FailBeforeCharge,
		rides.FailAfterCharge,
		rides.FailAfterChargeCreated,
		rides.FailAfterFinished,
		rides.FailBeforeResponse,
	}
	for _, seam := range seams {
		for _, recovery := range []string{"ClientRetries", "CompleterFinishes"} {
			t.Run(seam+"/"+recovery, func(t *testing.T) {
				t.Parallel()
				b := apitest.New(t, apitest.Options{LockTimeout: lockTimeout, Plain: plain})
				key := apitest.NewKey()

				var crashed atomic.Bool
				b.Fail(seam, func(context.Context) error {
					if crashed.Swap(true) {
						return nil
					}
					runtime.Goexit()
					return nil
				})
				req, err := http.NewRequest(http.MethodPost, b.URL+"/rides", strings.NewReader(apitest.DefaultParams))
				require.NoError(t, err)
				req.Header.Set("Authorization", "Bearer "+b.Token)
				req.Header.Set("Idempotency-Key", key)
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				require.Error(t, err, "the connection dies with the request")
				require.True(t, crashed.Load())

				time.Sleep(lockTimeout + 50*time.Millisecond) // the dead request's lock goes stale

				switch recovery {
				case "ClientRetries":
					resp := b.PostRide(t, key, apitest.DefaultParams)
					require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
					replay := b.PostRide(t, key, apitest.DefaultParams)
					require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
					require.Equal(t, string(resp.Body), string(replay.Body))
				case "CompleterFinishes":
					c, err := completer.New(&completer.Config{
						Keys: b.Keys, Service: b.Service, MinAge: time.Nanosecond, RetryInterval: time.Nanosecond,
					})
					require.NoError(t, err)
					_, failed, err := c.RunOnce(context.Background())
					require.NoError(t, err)
					require.Zero(t, failed)
				}
				requireInvariants(t, b, key)
			})
		}
	}

	// A seam between two atomic phases sent in one pipeline: a crash there
	// (above) sends neither, a failure there sends only the first. The
	// first's recovery point is then committed on its own, the key locked
	// as a dead process would leave it, and the request recovers from it.
	between := map[string]idem.RecoveryPoint{
		rides.FailAfterChargeCreated: rides.ChargeCreated,
	}
	for seam, reached := range between {
		for _, recovery := range []string{"ClientRetries", "CompleterFinishes"} {
			t.Run(seam+"/FirstCommitsAlone/"+recovery, func(t *testing.T) {
				t.Parallel()
				b := apitest.New(t, apitest.Options{LockTimeout: lockTimeout, Plain: plain})
				key := apitest.NewKey()
				var failed atomic.Bool
				b.Fail(seam, func(context.Context) error {
					if failed.Swap(true) {
						return nil
					}
					return errors.New("injected failure between the commits")
				})
				resp := b.PostRide(t, key, apitest.DefaultParams)
				require.Equal(t, http.StatusInternalServerError, resp.Status, "%s", resp.Body)
				row := b.KeyRow(t, key)
				require.Equal(t, reached, row.RecoveryPoint, "the first phase committed alone")
				// Dead before it could unlock: the lock stays until stale.
				_, err := b.Pool.Exec(context.Background(),
					`UPDATE idempotency_keys SET locked_at = now(), lock_token = gen_random_uuid() WHERE id = $1`, row.ID)
				require.NoError(t, err)
				time.Sleep(lockTimeout + 50*time.Millisecond)

				switch recovery {
				case "ClientRetries":
					resp := b.PostRide(t, key, apitest.DefaultParams)
					require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
				case "CompleterFinishes":
					c, err := completer.New(&completer.Config{
						Keys: b.Keys, Service: b.Service, MinAge: time.Nanosecond, RetryInterval: time.Nanosecond,
					})
					require.NoError(t, err)
					_, failed, err := c.RunOnce(context.Background())
					require.NoError(t, err)
					require.Zero(t, failed)
				}
				requireInvariants(t, b, key)
			})
		}
	}
}

// requireInvariants checks the promise after a scenario: the key finished
// with a 201, exactly one successful charge exists for it and it is on the
// ride, every charge at Stripe belongs to a ride with the right amount, and
// exactly one receipt job was staged for the paid ride.
func requireInvariants(t *testing.T, b *apitest.Stack, key string) {
	t.Helper()
	row := b.KeyRow(t, key)
	require.Equal(t, idem.Finished, row.RecoveryPoint, "the key is finished, not wedged")
	require.Equal(t, http.StatusCreated, *row.ResponseCode)
	charges := b.ChargesFor(row.ID)
	require.Len(t, charges, 1, "exactly one charge for the key")

	for _, c := range b.Stripe.Charges() {
		if c.Status != "succeeded" {
			continue
		}
		require.Equal(t, 1, b.Count(t,
			`SELECT count(*) FROM rides WHERE stripe_charge_id = $1 AND amount = $2 AND currency = $3 AND user_id::text = $4`,
			c.ID, c.Amount, c.Currency, c.Metadata[rides.MetadataUserID]),
			"charge %s belongs to its ride with the same amount", c.ID)
	}
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides`))
	require.Equal(t, 1, b.Count(t,
		`SELECT count(*) FROM staged_jobs WHERE job_name = 'send_ride_receipt' AND job_args->>'stripe_charge_id' = $1`,
		charges[0].ID), "exactly one receipt staged")
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'ride.created'`))
}
