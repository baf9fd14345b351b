package rides_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
	"github.com/rocketrides/rocketrides/internal/user"
)

// TestRideLifecycle follows a ride's status through every way its charge
// can end, as a client sees it: in the POST's answer and in GET. It runs
// on both of the key store's paths, the fast one and the plain one.
func TestRideLifecycle(t *testing.T) {
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
			setup := func(t *testing.T, opts apitest.Options) *testBundle {
				t.Helper()
				opts.Plain = path.plain
				return &testBundle{Stack: apitest.New(t, opts)}
			}

			// getRide reads a ride of token's user through the API.
			getRide := func(t *testing.T, b *testBundle, token string, id any) map[string]any {
				t.Helper()
				resp := b.Do(t, http.MethodGet, fmt.Sprintf("/rides/%v", id), "", "Authorization", "Bearer "+token)
				require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
				return resp.JSON(t)
			}
			// listIDs lists the ids of token's rides with status.
			listIDs := func(t *testing.T, b *testBundle, token string, status rides.Status) []any {
				t.Helper()
				resp := b.Do(t, http.MethodGet, "/rides?status="+string(status), "", "Authorization", "Bearer "+token)
				require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
				var ids []any
				for _, r := range resp.JSON(t)["data"].([]any) {
					ride := r.(map[string]any)
					require.Equal(t, string(status), ride["status"])
					ids = append(ids, ride["id"])
				}
				return ids
			}
			// rideID reads ride_id from a problem document: the ride the
			// request created.
			rideID := func(t *testing.T, resp *apitest.Response) any {
				t.Helper()
				id, ok := resp.JSON(t)["ride_id"]
				require.True(t, ok, "the problem names the ride: %s", resp.Body)
				return id
			}

			t.Run("ChargedRideSucceeded", func(t *testing.T) {
				t.Parallel()
				b := setup(t, apitest.Options{})
				resp := b.PostRide(t, apitest.NewKey(), apitest.DefaultParams)
				require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
				ride := resp.JSON(t)
				require.Equal(t, "succeeded", ride["status"])
				require.NotNil(t, ride["stripe_charge_id"])
				require.Equal(t, "succeeded", getRide(t, b, b.Token, ride["id"])["status"])
				require.Equal(t, []any{ride["id"]}, listIDs(t, b, b.Token, rides.StatusSucceeded))
			})

			t.Run("UnsettledRideIsPendingUntilTheRetrySettlesIt", func(t *testing.T) {
				t.Parallel()
				b := setup(t, apitest.Options{})
				key := apitest.NewKey()
				b.Fail(rides.FailBeforeCharge, func(context.Context) error { return errors.New("injected failure") })
				failed := b.PostRide(t, key, apitest.DefaultParams)
				require.Equal(t, http.StatusInternalServerError, failed.Status, "%s", failed.Body)

				pending := listIDs(t, b, b.Token, rides.StatusPending)
				require.Len(t, pending, 1)
				ride := getRide(t, b, b.Token, pending[0])
				require.Equal(t, "pending", ride["status"])
				require.Nil(t, ride["stripe_charge_id"])

				b.Fail(rides.FailBeforeCharge, nil)
				resp := b.PostRide(t, key, apitest.DefaultParams)
				require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
				require.Equal(t, pending[0], resp.JSON(t)["id"])
				require.Equal(t, "succeeded", getRide(t, b, b.Token, pending[0])["status"])
				require.Empty(t, listIDs(t, b, b.Token, rides.StatusPending))
			})

			t.Run("DeclinedCardDeclinesTheRide", func(t *testing.T) {
				t.Parallel()
				b := setup(t, apitest.Options{})
				resp := b.Do(t, http.MethodPost, "/rides", apitest.DefaultParams,
					"Authorization", "Bearer "+b.BadSourceToken, "Idempotency-Key", apitest.NewKey(), "Content-Type", formType)
				require.Equal(t, http.StatusPaymentRequired, resp.Status, "%s", resp.Body)
				id := rideID(t, resp)
				ride := getRide(t, b, b.BadSourceToken, id)
				require.Equal(t, "declined", ride["status"])
				require.Nil(t, ride["stripe_charge_id"])
				require.Equal(t, []any{id}, listIDs(t, b, b.BadSourceToken, rides.StatusDeclined))
				require.Empty(t, listIDs(t, b, b.BadSourceToken, rides.StatusPending), "a declined ride no longer looks pending")
			})

			t.Run("RejectedChargeFailsTheRide", func(t *testing.T) {
				t.Parallel()
				b := setup(t, apitest.Options{})
				token := "tok-missing-customer-" + apitest.NewKey()
				_, err := user.Upsert(context.Background(), b.Pool, "ghost@example.com", "cus_doesnotexist", token)
				require.NoError(t, err)
				resp := b.Do(t, http.MethodPost, "/rides", apitest.DefaultParams,
					"Authorization", "Bearer "+token, "Idempotency-Key", apitest.NewKey(), "Content-Type", formType)
				require.Equal(t, http.StatusBadGateway, resp.Status, "%s", resp.Body)
				require.Equal(t, "payment_rejected", resp.JSON(t)["code"])
				require.Equal(t, "failed", getRide(t, b, token, rideID(t, resp))["status"])
			})

			t.Run("SetAsideRideNeedsReview", func(t *testing.T) {
				t.Parallel()
				b := setup(t, apitest.Options{MaxChargeAttempts: 1})
				key := apitest.NewKey()
				b.Stripe.SetFaults(fakestripe.Faults{StoreFailureNext: 1})
				resp := b.PostRide(t, key, apitest.DefaultParams)
				require.Equal(t, http.StatusBadGateway, resp.Status, "%s", resp.Body)
				require.Equal(t, "payment_needs_review", resp.JSON(t)["code"])
				require.Equal(t, []any{rideID(t, resp)}, listIDs(t, b, b.Token, rides.StatusNeedsReview))
				require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE id = $1 AND attention_reason IS NOT NULL`,
					b.KeyRow(t, key).ID))
			})

			// The flag on the key and the ride's needs_review are one atomic
			// phase: when the ride cannot move, the key is not set aside either.
			t.Run("SetAsideCommitsWithTheRideOrNotAtAll", func(t *testing.T) {
				t.Parallel()
				b := setup(t, apitest.Options{MaxChargeAttempts: 1})
				key := apitest.NewKey()
				b.Fail(rides.FailBeforeCharge, func(context.Context) error { return errors.New("injected failure") })
				require.Equal(t, http.StatusInternalServerError, b.PostRide(t, key, apitest.DefaultParams).Status)
				b.Fail(rides.FailBeforeCharge, nil)
				// A ride settled behind the request's back: it may not move.
				keyID := b.KeyRow(t, key).ID
				_, err := b.Pool.Exec(context.Background(), `UPDATE rides SET status = 'declined' WHERE idempotency_key_id = $1`, keyID)
				require.NoError(t, err)

				b.Stripe.SetFaults(fakestripe.Faults{StoreFailureNext: 1})
				resp := b.PostRide(t, key, apitest.DefaultParams)
				require.Equal(t, http.StatusInternalServerError, resp.Status, "%s", resp.Body)
				require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE id = $1 AND attention_reason IS NOT NULL`, keyID),
					"the flag rolled back with the ride's update")
				require.Equal(t, rides.RideCreated, b.KeyRow(t, key).RecoveryPoint)
				require.Nil(t, b.KeyRow(t, key).LockedAt)
			})

			// After a 5xx the ride exists as pending, and the problem names it,
			// so that the client can follow it whatever it does next.
			for _, tc := range []struct {
				name     string
				fail     func(*testBundle)
				wantCode string
				status   int
			}{
				{"InternalErrorNamesThePendingRide", func(b *testBundle) {
					b.Fail(rides.FailBeforeCharge, func(context.Context) error { return errors.New("injected failure") })
				}, "internal_error", http.StatusInternalServerError},
				{"PaymentUnavailableNamesThePendingRide", func(b *testBundle) {
					b.Stripe.SetFaults(fakestripe.Faults{FailNext: 3, FailStatus: http.StatusServiceUnavailable})
				}, "payment_unavailable", http.StatusServiceUnavailable},
				{"ContentionNamesThePendingRide", func(b *testBundle) {
					b.Fail(rides.FailInRecordCharge, func(context.Context) error {
						return &pgconn.PgError{Code: "40001", Message: "could not serialize access"}
					})
				}, "database_contention", http.StatusServiceUnavailable},
			} {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					b := setup(t, apitest.Options{})
					tc.fail(b)
					resp := b.PostRide(t, apitest.NewKey(), apitest.DefaultParams)
					require.Equal(t, tc.status, resp.Status, "%s", resp.Body)
					require.Equal(t, tc.wantCode, resp.JSON(t)["code"])
					ride := getRide(t, b, b.Token, rideID(t, resp))
					require.Equal(t, "pending", ride["status"])
					require.Nil(t, ride["stripe_charge_id"])
				})
			}

			t.Run("FailureBeforeTheRideNamesNone", func(t *testing.T) {
				t.Parallel()
				b := setup(t, apitest.Options{})
				b.Fail(rides.FailAfterClaim, func(context.Context) error { return errors.New("injected failure") })
				resp := b.PostRide(t, apitest.NewKey(), apitest.DefaultParams)
				require.Equal(t, http.StatusInternalServerError, resp.Status, "%s", resp.Body)
				require.NotContains(t, resp.JSON(t), "ride_id")
				require.Zero(t, b.Count(t, `SELECT count(*) FROM rides`))
			})

			// A retry that stops again before it reads its ride (here: at once,
			// on a key set aside) still names the ride.
			t.Run("ResumedRequestNamesItsRide", func(t *testing.T) {
				t.Parallel()
				b := setup(t, apitest.Options{MaxChargeAttempts: 1})
				key := apitest.NewKey()
				b.Stripe.SetFaults(fakestripe.Faults{StoreFailureNext: 1})
				first := b.PostRide(t, key, apitest.DefaultParams)
				require.Equal(t, http.StatusBadGateway, first.Status, "%s", first.Body)
				again := b.PostRide(t, key, apitest.DefaultParams)
				require.Equal(t, http.StatusBadGateway, again.Status, "%s", again.Body)
				require.Equal(t, "payment_needs_review", again.JSON(t)["code"])
				require.Equal(t, rideID(t, first), rideID(t, again))
			})

			t.Run("ListRejectsUnknownStatus", func(t *testing.T) {
				t.Parallel()
				b := setup(t, apitest.Options{})
				resp := b.Do(t, http.MethodGet, "/rides?status=refunded", "", "Authorization", "Bearer "+b.Token)
				require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
				body := resp.JSON(t)
				require.Equal(t, "invalid_query", body["code"])
				require.Contains(t, body["detail"], "status")
				require.Contains(t, body["detail"], `"refunded"`)
				require.Equal(t, "status", body["invalid_params"].([]any)[0].(map[string]any)["name"])
			})

			// The schema keeps a ride's status and its charge together, whatever
			// writes them.
			t.Run("SchemaKeepsStatusAndChargeTogether", func(t *testing.T) {
				t.Parallel()
				b := setup(t, apitest.Options{})
				resp := b.PostRide(t, apitest.NewKey(), apitest.DefaultParams)
				require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
				id := resp.JSON(t)["id"]
				for _, sql := range []string{
					`UPDATE rides SET status = 'pending' WHERE id = $1`,
					`UPDATE rides SET stripe_charge_id = NULL WHERE id = $1`,
					`UPDATE rides SET status = 'refunded', stripe_charge_id = NULL WHERE id = $1`,
				} {
					_, err := b.Pool.Exec(context.Background(), sql, id)
					var pgErr *pgconn.PgError
					require.ErrorAs(t, err, &pgErr, sql)
					require.Equal(t, "23514", pgErr.Code, "check_violation: %s", sql)
				}
			})
		})
	}
}
