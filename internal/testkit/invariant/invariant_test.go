package invariant_test

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/rocketrides/rocketrides/internal/jobs"
	"github.com/rocketrides/rocketrides/internal/platform/mail"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
	"github.com/rocketrides/rocketrides/internal/testkit/invariant"
)

func TestCheck(t *testing.T) {
	t.Parallel()

	// testBundle is a database and a Stripe fake holding two rides that
	// went right (201) and one declined request (402), for a case to
	// break.
	type testBundle struct {
		*apitest.Stack
		keys     []int64 // the 201 keys' ids
		declined int64   // the 402 key's id
		rideIDs  []int64
	}
	setup := func(t *testing.T, plain ...bool) *testBundle {
		t.Helper()
		b := &testBundle{Stack: apitest.New(t, apitest.Options{Plain: len(plain) > 0 && plain[0]})}
		for range 2 {
			key := apitest.NewKey()
			resp := b.PostRide(t, key, apitest.DefaultParams)
			require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
			b.keys = append(b.keys, b.KeyRow(t, key).ID)
			id, ok := resp.JSON(t)["id"].(float64)
			require.True(t, ok)
			b.rideIDs = append(b.rideIDs, int64(id))
		}
		key := apitest.NewKey()
		resp := b.Do(t, http.MethodPost, "/rides", apitest.DefaultParams,
			"Authorization", "Bearer "+b.BadSourceToken, "Idempotency-Key", key,
			"Content-Type", "application/x-www-form-urlencoded")
		require.Equal(t, http.StatusPaymentRequired, resp.Status, "%s", resp.Body)
		require.NoError(t, b.Pool.QueryRow(context.Background(),
			`SELECT id FROM idempotency_keys WHERE idempotency_key = $1`, key).Scan(&b.declined))
		return b
	}
	check := func(t *testing.T, b *testBundle, opts invariant.Options) invariant.Report {
		t.Helper()
		report, err := invariant.Check(context.Background(), b.Pool,
			invariant.NewStripeClient(b.StripeURL, apitest.StripeKey), opts)
		require.NoError(t, err)
		t.Logf("%s", report)
		return report
	}
	exec := func(t *testing.T, b *testBundle, sql string, args ...any) {
		t.Helper()
		_, err := b.Pool.Exec(context.Background(), sql, args...)
		require.NoError(t, err, sql)
	}
	// charge makes a successful charge of User at the fake, behind the
	// service's back.
	charge := func(t *testing.T, b *testBundle, amount int64, metadata map[string]string) string {
		t.Helper()
		params := &stripe.ChargeParams{
			Amount:   stripe.Int64(amount),
			Currency: stripe.String("usd"),
			Customer: stripe.String(b.User.StripeCustomerID),
		}
		for k, v := range metadata {
			params.AddMetadata(k, v)
		}
		c, err := invariant.NewStripeClient(b.StripeURL, apitest.StripeKey).Charges.New(params)
		require.NoError(t, err)
		return c.ID
	}
	requireViolations := func(t *testing.T, report invariant.Report, want map[invariant.Kind]int) {
		t.Helper()
		got := map[invariant.Kind]int{}
		for _, v := range report.Violations {
			got[v.Kind]++
		}
		require.Equal(t, want, got, "%s", report)
		require.Equal(t, len(want) == 0, report.OK())
	}
	itoa := func(n int64) string { return strconv.FormatInt(n, 10) }

	// On both of the key store's paths, the same requests leave the same
	// state.
	t.Run("HoldsForRequestsThatWentRight", func(t *testing.T) {
		t.Parallel()
		for _, path := range []struct {
			name  string
			plain bool
		}{{"Fast", false}, {"Plain", true}} {
			t.Run(path.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t, path.plain)
				// Pages of two make the three charges of the customers span pages.
				report := check(t, b, invariant.Options{PageSize: 2})
				requireViolations(t, report, map[invariant.Kind]int{})
				require.Equal(t, 3, report.Keys)
				require.Equal(t, 2, report.KeysCreated)
				require.Equal(t, 1, report.KeysDeclined)
				require.Equal(t, 3, report.Rides, "the declined request created its ride before the charge")
				require.Equal(t, 2, report.PaidRides)
				require.Equal(t, 2, report.Charges)
				require.Equal(t, 1, report.FailedCharges)
				require.Equal(t, 2, report.ReceiptJobs)
				require.Contains(t, report.String(), "invariants hold")
			})
		}
	})

	t.Run("FindsDoubleCharge", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		charge(t, b, 2000, map[string]string{"ride_id": itoa(b.rideIDs[0]), "idempotency_key_id": itoa(b.keys[0])})
		report := check(t, b, invariant.Options{})
		requireViolations(t, report, map[invariant.Kind]int{invariant.DoubleCharge: 1})
		require.Equal(t, 1, report.DoubleCharges)
		require.Contains(t, report.String(), "INVARIANTS BROKEN")
	})

	t.Run("FindsChargeWithoutRide", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		stray := []string{
			charge(t, b, 2000, map[string]string{"ride_id": "999999", "idempotency_key_id": "999999"}),
			charge(t, b, 2000, nil),
		}
		report := check(t, b, invariant.Options{})
		requireViolations(t, report, map[invariant.Kind]int{invariant.ChargeWithoutRide: 2})
		require.Equal(t, 2, report.ChargesWithoutRide)
		var named []string
		for _, v := range report.Violations {
			named = append(named, v.ChargeID)
		}
		require.ElementsMatch(t, stray, named, "each violation names its charge")
	})

	t.Run("FindsChargeNamingAnotherRequestsRide", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		charge(t, b, 2000, map[string]string{"ride_id": itoa(b.rideIDs[0]), "idempotency_key_id": itoa(b.keys[1])})
		report := check(t, b, invariant.Options{})
		// The second key now also has two charges.
		requireViolations(t, report, map[invariant.Kind]int{invariant.ChargeWithoutRide: 1, invariant.DoubleCharge: 1})
	})

	// The database lost a paid request's commits: its charge names a
	// request of which nothing is left.
	t.Run("FindsChargeOfALostRequest", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		exec(t, b, `DELETE FROM staged_jobs WHERE (job_args->>'ride_id')::bigint = $1`, b.rideIDs[0])
		exec(t, b, `DELETE FROM audit_records WHERE resource_id = $1`, b.rideIDs[0])
		exec(t, b, `DELETE FROM rides WHERE id = $1`, b.rideIDs[0])
		exec(t, b, `DELETE FROM idempotency_keys WHERE id = $1`, b.keys[0])
		report := check(t, b, invariant.Options{})
		requireViolations(t, report, map[invariant.Kind]int{invariant.ChargeWithoutRide: 1})
		require.Equal(t, 1, report.ChargesWithoutRide)
	})

	t.Run("FindsAmountMismatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		exec(t, b, `UPDATE rides SET amount = 2500 WHERE id = $1`, b.rideIDs[0])
		report := check(t, b, invariant.Options{})
		// The ride is off the price, and its charge is off the ride.
		requireViolations(t, report, map[invariant.Kind]int{invariant.AmountMismatch: 2})
	})

	t.Run("FindsChargeNotRecorded", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		exec(t, b, `UPDATE rides SET stripe_charge_id = NULL, status = 'pending' WHERE id = $1`, b.rideIDs[0])
		report := check(t, b, invariant.Options{})
		requireViolations(t, report, map[invariant.Kind]int{
			invariant.ChargeNotRecorded: 1,
			invariant.MissingCharge:     1, // the 201 has no recorded charge
			invariant.ResponseMismatch:  1, // the stored 201 shows the charge
			invariant.ReceiptJobUnpaid:  1, // the ride no longer counts as paid
		})
	})

	t.Run("FindsRecordedChargeStripeDoesNotHave", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		exec(t, b, `UPDATE rides SET stripe_charge_id = 'ch_nowhere' WHERE id = $1`, b.rideIDs[0])
		exec(t, b, `UPDATE idempotency_keys SET response_body = jsonb_set(response_body, '{stripe_charge_id}', '"ch_nowhere"') WHERE id = $1`, b.keys[0])
		report := check(t, b, invariant.Options{})
		requireViolations(t, report, map[invariant.Kind]int{
			invariant.MissingCharge:     1,
			invariant.ChargeNotRecorded: 1, // the real charge lost its ride
		})
	})

	t.Run("FindsResponseMismatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		exec(t, b, `UPDATE idempotency_keys SET response_body = jsonb_set(response_body, '{id}', '424242') WHERE id = $1`, b.keys[0])
		report := check(t, b, invariant.Options{})
		requireViolations(t, report, map[invariant.Kind]int{invariant.ResponseMismatch: 1})
	})

	t.Run("FindsAStatusThatDisagreesWithItsKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		exec(t, b, `UPDATE rides SET status = 'pending' WHERE idempotency_key_id = $1`, b.declined)
		report := check(t, b, invariant.Options{})
		requireViolations(t, report, map[invariant.Kind]int{invariant.StatusMismatch: 1})
		require.Contains(t, report.String(), "finished with 402")
	})

	t.Run("FindsChargeOnDeclinedKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var rideID int64
		require.NoError(t, b.Pool.QueryRow(context.Background(),
			`SELECT id FROM rides WHERE idempotency_key_id = $1`, b.declined).Scan(&rideID))
		charge(t, b, 2000, map[string]string{"ride_id": itoa(rideID), "idempotency_key_id": itoa(b.declined)})
		report := check(t, b, invariant.Options{})
		requireViolations(t, report, map[invariant.Kind]int{
			invariant.ChargeOnFailedKey: 1,
			invariant.ChargeNotRecorded: 1,
		})
	})

	t.Run("UnfinishedKeyFailsDrainedCheck", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.Claim(t, apitest.NewKey())
		report := check(t, b, invariant.Options{})
		requireViolations(t, report, map[invariant.Kind]int{invariant.KeyUnfinished: 1})
		require.Equal(t, 1, report.KeysUnfinished)
	})

	t.Run("LiveLockIsWedgedWhenNothingRuns", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.Claim(t, apitest.NewKey())
		report := check(t, b, invariant.Options{AllowUnfinished: true})
		requireViolations(t, report, map[invariant.Kind]int{invariant.KeyWedged: 1})
		// With a lock timeout shorter than the lock's age, the lock is
		// stale and the key resumable.
		time.Sleep(50 * time.Millisecond)
		report = check(t, b, invariant.Options{AllowUnfinished: true, LockTimeout: 10 * time.Millisecond})
		requireViolations(t, report, map[invariant.Kind]int{})
	})

	t.Run("ChargedButUnrecordedKeyIsResumable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A request cut off after Stripe answered: the key is back at
		// ride_created and the ride has no charge yet.
		exec(t, b, `UPDATE rides SET stripe_charge_id = NULL, status = 'pending' WHERE id = $1`, b.rideIDs[0])
		exec(t, b, `DELETE FROM staged_jobs WHERE (job_args->>'ride_id')::bigint = $1`, b.rideIDs[0])
		exec(t, b, `UPDATE idempotency_keys SET recovery_point = 'ride_created', response_code = NULL, response_body = NULL WHERE id = $1`, b.keys[0])
		report := check(t, b, invariant.Options{AllowUnfinished: true})
		requireViolations(t, report, map[invariant.Kind]int{})
		report = check(t, b, invariant.Options{})
		requireViolations(t, report, map[invariant.Kind]int{invariant.KeyUnfinished: 1, invariant.ChargeNotRecorded: 1})
	})

	t.Run("FindsKeySetAsideForHuman", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		exec(t, b, `UPDATE idempotency_keys SET attention_reason = 'charge outcome unknown' WHERE id = $1`, b.keys[0])
		requireViolations(t, check(t, b, invariant.Options{}), map[invariant.Kind]int{invariant.KeyNeedsAttention: 1})
		report := check(t, b, invariant.Options{AllowAttention: true})
		requireViolations(t, report, map[invariant.Kind]int{})
		require.Equal(t, 1, report.KeysNeedAttention)
	})

	t.Run("FindsFinishedKeyStillLocked", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		exec(t, b, `UPDATE idempotency_keys SET locked_at = now(), lock_token = gen_random_uuid() WHERE id = $1`, b.keys[0])
		requireViolations(t, check(t, b, invariant.Options{}), map[invariant.Kind]int{invariant.KeyWedged: 1})
	})

	t.Run("FindsMissingAndDuplicatedReceiptJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		exec(t, b, `DELETE FROM staged_jobs WHERE (job_args->>'ride_id')::bigint = $1`, b.rideIDs[0])
		exec(t, b, `INSERT INTO staged_jobs (job_name, job_args) SELECT job_name, job_args FROM staged_jobs WHERE (job_args->>'ride_id')::bigint = $1`, b.rideIDs[1])
		exec(t, b, `INSERT INTO staged_jobs (job_name, job_args) VALUES ($1, '{"ride_id": 999999}')`, jobs.ReceiptArgs{}.Kind())
		report := check(t, b, invariant.Options{})
		requireViolations(t, report, map[invariant.Kind]int{
			invariant.ReceiptJobMissing:    1,
			invariant.ReceiptJobDuplicated: 1,
			invariant.ReceiptJobUnpaid:     1,
		})
	})

	t.Run("RequiresOneReceiptPerPaidRideOnceDrained", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		report := check(t, b, invariant.Options{ReceiptsDrained: true})
		requireViolations(t, report, map[invariant.Kind]int{invariant.ReceiptMissing: 2})
		require.Equal(t, 2, report.ReceiptsMissing)
		var named []int64
		for _, v := range report.Violations {
			named = append(named, v.RideID)
		}
		require.ElementsMatch(t, b.rideIDs, named, "each violation names its ride")

		// Drain for real: the enqueuer moves the staged jobs into River,
		// the worker sends them. The jobs now count in River.
		ctx := context.Background()
		logger := slog.New(slog.NewTextHandler(t.Output(), nil))
		enqueuer, err := jobs.NewEnqueuer(&jobs.EnqueuerConfig{Pool: b.Pool, Kinds: jobs.Kinds(), Logger: logger})
		require.NoError(t, err)
		moved, err := enqueuer.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, moved)
		mailer, err := mail.NewDir(&mail.DirConfig{Dir: t.TempDir(), From: jobs.DefaultReceiptFrom})
		require.NoError(t, err)
		client, err := jobs.NewClient(&jobs.ClientConfig{Pool: b.Pool, Mailer: mailer, Logger: logger})
		require.NoError(t, err)
		worked, err := jobs.WorkAvailable(ctx, client)
		require.NoError(t, err)
		require.Equal(t, 2, worked)

		report = check(t, b, invariant.Options{ReceiptsDrained: true})
		requireViolations(t, report, map[invariant.Kind]int{})
		require.Equal(t, 2, report.Receipts)
		require.Equal(t, 2, report.ReceiptJobs)

		// A receipt for a ride that was never paid.
		exec(t, b, `INSERT INTO ride_receipts (ride_id, stripe_charge_id, message_id, recipient)
			SELECT id, 'ch_none', 'stray@rocketrides.local', 'user@example.com' FROM rides WHERE idempotency_key_id = $1`, b.declined)
		requireViolations(t, check(t, b, invariant.Options{ReceiptsDrained: true}),
			map[invariant.Kind]int{invariant.ReceiptUnpaid: 1})
	})
}
