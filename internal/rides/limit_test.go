package rides_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/ratelimit"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

// TestChargeCap is the cap on each user's charges, against card testing:
// one token made 10,105 charges in 15 s before it. (Across two api
// processes: internal/proof/e2e, TestRateLimitsAcrossProcesses.)
//
// It runs on both of the key store's paths: the count goes ahead of the
// ride's phase in a transaction of its own on the fast path, and first in
// the phase's own on the plain path.
func TestChargeCap(t *testing.T) {
	t.Parallel()
	for _, path := range []struct {
		name  string
		plain bool
	}{{"Fast", false}, {"Plain", true}} {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			type testBundle struct {
				*apitest.Stack
			}
			setup := func(t *testing.T) *testBundle {
				t.Helper()
				return &testBundle{Stack: apitest.New(t, apitest.Options{
					ChargeLimit: ratelimit.Policy{Name: ratelimit.ChargesPolicy, Quota: 1, Window: time.Hour},
					Plain:       path.plain,
				})}
			}

			t.Run("RefusesBeforeTheRideAndKeepsNothingOnTheKey", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				first := apitest.NewKey()
				require.Equal(t, http.StatusCreated, b.PostRide(t, first, apitest.DefaultParams).Status)

				refused := apitest.NewKey()
				resp := b.PostRide(t, refused, apitest.DefaultParams) // checked against the contract
				require.Equal(t, http.StatusTooManyRequests, resp.Status, "%s", resp.Body)
				require.Equal(t, "rate_limited", resp.JSON(t)["code"])
				require.NotContains(t, resp.JSON(t), "ride_id")
				require.Equal(t, `"charges";q=1;w=3600`, resp.Header.Get("RateLimit-Policy"))
				require.Regexp(t, `^"charges";r=0;t=[0-9]+$`, resp.Header.Get("RateLimit"))
				require.NotEmpty(t, resp.Header.Get("Retry-After"))

				require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1`, refused), "no key")
				require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides`), "no ride")
				require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records`), "no audit record")
				require.Len(t, b.Stripe.Charges(), 1, "no charge")
			})

			t.Run("NeverRefusesOrCountsAReplay", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				first := apitest.NewKey()
				created := b.PostRide(t, first, apitest.DefaultParams)
				require.Equal(t, http.StatusCreated, created.Status)
				for range 3 {
					replay := b.PostRide(t, first, apitest.DefaultParams)
					require.Equal(t, http.StatusCreated, replay.Status, "%s", replay.Body)
					require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
					require.Equal(t, string(created.Body), string(replay.Body))
				}
				var hits int64
				require.NoError(t, b.Pool.QueryRow(context.Background(),
					`SELECT hits FROM rate_limit_charges WHERE user_id = $1`, b.User.ID).Scan(&hits))
				require.Equal(t, int64(1), hits, "one charge counted, however often it was replayed")
			})

			t.Run("ADeclinedChargeCountsToo", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				declined := b.Do(t, http.MethodPost, "/rides", apitest.DefaultParams,
					"Authorization", "Bearer "+b.BadSourceToken, "Idempotency-Key", apitest.NewKey(), "Content-Type", formType)
				require.Equal(t, http.StatusPaymentRequired, declined.Status)
				next := b.Do(t, http.MethodPost, "/rides", apitest.DefaultParams,
					"Authorization", "Bearer "+b.BadSourceToken, "Idempotency-Key", apitest.NewKey(), "Content-Type", formType)
				require.Equal(t, http.StatusTooManyRequests, next.Status, "card testing is mostly declines")
			})

			t.Run("AKeyThatCannotBeDiscardedIsNotAnswered429", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				require.Equal(t, http.StatusCreated, b.PostRide(t, apitest.NewKey(), apitest.DefaultParams).Status)
				// The delete fails, as it would if the database went away
				// between the count's refusal and the discard.
				_, err := b.Pool.Exec(context.Background(), `
			CREATE FUNCTION refuse_key_delete() RETURNS trigger LANGUAGE plpgsql AS
			$$ BEGIN RAISE EXCEPTION 'keys cannot be deleted now'; END $$;
			CREATE TRIGGER refuse_key_delete BEFORE DELETE ON idempotency_keys
			FOR EACH ROW EXECUTE FUNCTION refuse_key_delete();`)
				require.NoError(t, err)

				key := apitest.NewKey()
				resp := b.PostRide(t, key, apitest.DefaultParams) // checked against the contract
				require.Equal(t, http.StatusInternalServerError, resp.Status, "not 429: the key is still there, %s", resp.Body)
				require.Contains(t, resp.JSON(t)["detail"], "Retry with the same Idempotency-Key")
				row := b.KeyRow(t, key)
				require.Equal(t, idem.Started, row.RecoveryPoint)
				require.Nil(t, row.LockedAt, "released for the retry")
				require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides`), "no ride")

				// The retry is counted again, refused, and this time its key goes.
				_, err = b.Pool.Exec(context.Background(), `DROP TRIGGER refuse_key_delete ON idempotency_keys`)
				require.NoError(t, err)
				retry := b.PostRide(t, key, apitest.DefaultParams)
				require.Equal(t, http.StatusTooManyRequests, retry.Status, "%s", retry.Body)
				require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1`, key))
				require.Len(t, b.Stripe.Charges(), 1, "no charge")
			})

			t.Run("RefusesTheCompleterTooButLeavesItTheKey", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				require.Equal(t, http.StatusCreated, b.PostRide(t, apitest.NewKey(), apitest.DefaultParams).Status)
				// A request its client left at started, as the completer claims
				// it: its client was never told 429, and was promised that the
				// server would finish it.
				key := apitest.NewKey()
				claimed := b.Claim(t, key)
				_, err := b.Service.Resume(context.Background(), claimed)
				var refused *ratelimit.Exceeded
				require.True(t, errors.As(err, &refused), "%v", err)
				row := b.KeyRow(t, key)
				require.Equal(t, idem.Started, row.RecoveryPoint, "kept for a later attempt")
				require.Nil(t, row.LockedAt, "and released")
				require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides`))
			})
		})
	}
}
