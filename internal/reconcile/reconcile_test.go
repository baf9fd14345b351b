package reconcile

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/rocketrides/rocketrides/internal/dev/fakestripe/fakestripetest"
	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

func TestReconcile(t *testing.T) {
	t.Parallel()

	// paidRide is a ride created through POST /rides, and the charge that
	// paid for it.
	type paidRide struct {
		ID       int64
		ChargeID string
	}
	type testBundle struct {
		*apitest.Stack
		stripe *client.API
		rides  []paidRide // oldest first
	}
	// setup creates n paid rides through the API, and one ride whose card
	// is declined: Stripe keeps a failed charge for it, which must not
	// count.
	setup := func(t *testing.T, n int) *testBundle {
		t.Helper()
		b := &testBundle{Stack: apitest.New(t, apitest.Options{})}
		b.stripe = fakestripetest.NewClient(b.StripeURL, apitest.StripeKey)
		for range n {
			resp := b.PostRide(t, apitest.NewKey(), apitest.DefaultParams)
			require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
			body := resp.JSON(t)
			id, ok := body["id"].(float64)
			require.True(t, ok, "ride id in %s", resp.Body)
			b.rides = append(b.rides, paidRide{ID: int64(id), ChargeID: body["stripe_charge_id"].(string)})
		}
		resp := b.Do(t, http.MethodPost, "/rides", apitest.DefaultParams,
			"Authorization", "Bearer "+b.BadSourceToken,
			"Idempotency-Key", apitest.NewKey(),
			"Content-Type", "application/x-www-form-urlencoded")
		require.Equal(t, http.StatusPaymentRequired, resp.Status, "%s", resp.Body)
		return b
	}
	reconcile := func(t *testing.T, b *testBundle, cfg Config) *Report {
		t.Helper()
		cfg.Pool, cfg.Payments = b.Pool, b.Gateway
		r, err := New(&cfg)
		require.NoError(t, err)
		rep, err := r.RunOnce(context.Background())
		require.NoError(t, err)
		return rep
	}
	exec := func(t *testing.T, b *testBundle, sql string, args ...any) {
		t.Helper()
		_, err := b.Pool.Exec(context.Background(), sql, args...)
		require.NoError(t, err, sql)
	}
	charge := func(t *testing.T, b *testBundle, customer string, amount int64, metadata map[string]string) string {
		t.Helper()
		params := &stripe.ChargeParams{
			Amount:   stripe.Int64(amount),
			Currency: stripe.String("usd"),
			Customer: stripe.String(customer),
		}
		for k, v := range metadata {
			params.AddMetadata(k, v)
		}
		c, err := b.stripe.Charges.New(params)
		require.NoError(t, err)
		return c.ID
	}
	// found strips the details, which the tests check separately, so that
	// the rest compares exactly.
	found := func(rep *Report) []Discrepancy {
		out := make([]Discrepancy, 0, len(rep.Discrepancies))
		for _, d := range rep.Discrepancies {
			d.Detail = ""
			out = append(out, d)
		}
		return out
	}
	keyID := func(t *testing.T, b *testBundle, rideID int64) string {
		t.Helper()
		var id int64
		require.NoError(t, b.Pool.QueryRow(context.Background(),
			`SELECT idempotency_key_id FROM rides WHERE id = $1`, rideID).Scan(&id))
		return strconv.FormatInt(id, 10)
	}

	withRides := func(t *testing.T, b *testBundle) Config {
		t.Helper()
		service, err := rides.NewService(&rides.ServiceConfig{Pool: b.Pool, Keys: b.Keys, Payments: b.Gateway})
		require.NoError(t, err)
		return Config{Rides: service}
	}
	// lose deletes everything the database holds of the paid rides, as a
	// failover that lost their commits would.
	lose := func(t *testing.T, b *testBundle) {
		t.Helper()
		for _, sql := range []string{
			`DELETE FROM staged_jobs`, `DELETE FROM audit_records`, `DELETE FROM rides WHERE status = 'succeeded'`,
			`DELETE FROM idempotency_keys WHERE response_code = 201`,
		} {
			exec(t, b, sql)
		}
	}

	// A charge records the ride it paid for once the reconciler has seen
	// it: its own request could not name it (rides.ChargeRequest).
	t.Run("RecordedChargesGetTheirRideID", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 2)
		for _, c := range b.Stripe.Charges() {
			require.NotContains(t, c.Metadata, "ride_id")
		}
		rep := reconcile(t, b, Config{})
		require.Empty(t, rep.Discrepancies)
		require.Equal(t, 2, rep.Tagged)
		for _, ride := range b.rides {
			c, err := b.stripe.Charges.Get(ride.ChargeID, nil)
			require.NoError(t, err)
			require.Equal(t, strconv.FormatInt(ride.ID, 10), c.Metadata["ride_id"])
		}
		require.Len(t, b.Stripe.Charges(), 3, "tagging charged no one")
		require.Zero(t, reconcile(t, b, Config{}).Tagged, "tagged once")
	})

	// The database lost a paid ride's commits, key and all: the ride comes
	// back from its charge, under its id, and the client's retry replays
	// the 201.
	t.Run("LostRideIsRestored", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1)
		ride := b.rides[0]
		var key string
		require.NoError(t, b.Pool.QueryRow(context.Background(), `
			SELECT k.idempotency_key FROM idempotency_keys k JOIN rides r ON r.idempotency_key_id = k.id
			WHERE r.id = $1`, ride.ID).Scan(&key))
		require.Equal(t, 1, reconcile(t, b, Config{}).Tagged)
		lose(t, b)

		rep := reconcile(t, b, withRides(t, b))
		require.Empty(t, rep.Discrepancies)
		require.Equal(t, []Restoration{{ChargeID: ride.ChargeID, RideID: ride.ID}}, rep.Restored)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides WHERE id = $1 AND stripe_charge_id = $2 AND status = 'succeeded'`,
			ride.ID, ride.ChargeID))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'ride.restored' AND resource_id = $1`, ride.ID))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM staged_jobs WHERE job_args->>'ride_id' = $1`, strconv.FormatInt(ride.ID, 10)))

		resp := b.PostRide(t, key, apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
		require.EqualValues(t, ride.ID, resp.JSON(t)["id"])
		require.Len(t, b.Stripe.Charges(), 2, "one charge and the declined one: nothing charged again")

		again := reconcile(t, b, withRides(t, b))
		require.Empty(t, again.Discrepancies)
		require.Empty(t, again.Restored, "restored once")
	})

	// Without the ride's id on the charge, or with its id taken by another
	// ride since, the ride comes back under a new id.
	t.Run("LostRideTakesANewIDWhereItsOwnIsTaken", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1)
		ride := b.rides[0]
		lose(t, b)
		resp := b.PostRide(t, apitest.NewKey(), apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)

		rep := reconcile(t, b, withRides(t, b))
		require.Empty(t, rep.Discrepancies)
		require.Len(t, rep.Restored, 1)
		require.NotEqual(t, ride.ID, rep.Restored[0].RideID)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides WHERE id = $1 AND stripe_charge_id = $2`,
			rep.Restored[0].RideID, ride.ChargeID))
		next := b.PostRide(t, apitest.NewKey(), apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, next.Status, "%s", next.Body, "the sequence moved past the restored id")
	})

	// A declined request the database lost comes back with its 402: the
	// client's retry replays the answer it was given.
	t.Run("LostDeclineIsRestored", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		var key string
		require.NoError(t, b.Pool.QueryRow(context.Background(),
			`SELECT idempotency_key FROM idempotency_keys WHERE response_code = 402`).Scan(&key))
		exec(t, b, `DELETE FROM audit_records`)
		exec(t, b, `DELETE FROM rides`)
		exec(t, b, `DELETE FROM idempotency_keys`)

		rep := reconcile(t, b, withRides(t, b))
		require.Empty(t, rep.Discrepancies)
		require.Len(t, rep.Restored, 1)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides WHERE id = $1 AND status = 'declined' AND stripe_charge_id IS NULL`,
			rep.Restored[0].RideID))
		require.Zero(t, b.Count(t, `SELECT count(*) FROM staged_jobs`), "no receipt for a decline")

		resp := b.Do(t, http.MethodPost, "/rides", apitest.DefaultParams,
			"Authorization", "Bearer "+b.BadSourceToken, "Idempotency-Key", key,
			"Content-Type", "application/x-www-form-urlencoded")
		require.Equal(t, http.StatusPaymentRequired, resp.Status, "%s", resp.Body)
		require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
		require.Equal(t, "card_declined", resp.JSON(t)["code"])
		require.EqualValues(t, rep.Restored[0].RideID, resp.JSON(t)["ride_id"])
	})

	t.Run("LostRideIsReportedWithoutRides", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1)
		lose(t, b)
		rep := reconcile(t, b, Config{})
		require.Equal(t, []Discrepancy{{Kind: LostRide, ChargeID: b.rides[0].ChargeID}}, found(rep))
		require.Contains(t, rep.Discrepancies[0].Detail, "the database holds no such request")
	})

	// A charge whose metadata does not make the request it says it is
	// restores nothing: a person looks.
	t.Run("LostRideThatCannotBeRestoredIsLeftForAPerson", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		forged := charge(t, b, b.User.StripeCustomerID, rides.Price, map[string]string{
			rides.MetadataUserID:         strconv.FormatInt(b.User.ID, 10),
			rides.MetadataIdempotencyKey: "never-seen",
			rides.MetadataRequestParams:  `{"origin_lat":1,"origin_lon":2,"target_lat":3,"target_lon":4}`,
			rides.MetadataRequestSHA256:  "not-its-hash",
		})
		rep := reconcile(t, b, withRides(t, b))
		require.Equal(t, []Discrepancy{{Kind: LostRide, ChargeID: forged}}, found(rep))
		require.Contains(t, rep.Discrepancies[0].Detail, "not restored, a person decides: metadata request_params does not hash to request_sha256")
		require.Empty(t, rep.Restored)
		require.Zero(t, b.Count(t, `SELECT count(*) FROM rides WHERE status = 'succeeded'`))
		require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = 'never-seen'`))
	})

	t.Run("CleanWorldReportsNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 3)

		rep := reconcile(t, b, Config{})
		require.Empty(t, rep.Discrepancies)
		require.True(t, rep.OK())
		// Three paid rides and the declined one; the declined one's failed
		// charge is not counted.
		require.Equal(t, "charges=3 rides=4 charge_without_ride=0 unknown_charge=0 mismatch=0 double_charge=0 lost_ride=0 restored=0", rep.String())
		require.Zero(t, rep.Pending)
		require.WithinDuration(t, time.Now(), rep.Until, time.Minute)
		require.Equal(t, DefaultWindow, rep.Until.Sub(rep.Since))
	})

	t.Run("ChargeNamingNoRide", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 2)
		stray := charge(t, b, b.User.StripeCustomerID, 2000, map[string]string{"ride_id": "999999", "idempotency_key_id": "999999"})

		rep := reconcile(t, b, Config{})
		require.Equal(t, []Discrepancy{{Kind: ChargeWithoutRide, ChargeID: stray}}, found(rep))
		require.Equal(t, "metadata ride_id 999999 names no ride", rep.Discrepancies[0].Detail)
		require.Equal(t, 3, rep.Charges)
	})

	t.Run("OurCustomersChargeWithoutMetadata", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1)
		stray := charge(t, b, b.User.StripeCustomerID, 5000, nil)

		rep := reconcile(t, b, Config{})
		require.Equal(t, []Discrepancy{{Kind: ChargeWithoutRide, ChargeID: stray}}, found(rep))
		require.Equal(t, fmt.Sprintf("no ride_id in its metadata; customer %s is user %d", b.User.StripeCustomerID, b.User.ID),
			rep.Discrepancies[0].Detail)
	})

	t.Run("OtherApplicationsChargesAreIgnored", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1)
		params := &stripe.CustomerParams{Email: stripe.String("someone@elsewhere.example"), Source: stripe.String("tok_visa")}
		stranger, err := b.stripe.Customers.New(params)
		require.NoError(t, err)
		charge(t, b, stranger.ID, 7000, map[string]string{"order_id": "42"})

		rep := reconcile(t, b, Config{})
		require.Empty(t, rep.Discrepancies)
		require.Equal(t, 1, rep.Charges)
	})

	t.Run("RideRecordsChargeStripeDoesNotHave", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 2)
		ride := b.rides[1]
		exec(t, b, `UPDATE rides SET stripe_charge_id = 'ch_unknown' WHERE id = $1`, ride.ID)

		rep := reconcile(t, b, Config{})
		// The ride looks paid and is not; and the charge that did pay for
		// it is now money no ride accounts for.
		require.Equal(t, []Discrepancy{
			{Kind: ChargeWithoutRide, ChargeID: ride.ChargeID, RideID: ride.ID},
			{Kind: UnknownCharge, ChargeID: "ch_unknown", RideID: ride.ID},
		}, found(rep))
		require.Equal(t, fmt.Sprintf("ride %d records ch_unknown instead", ride.ID), rep.Discrepancies[0].Detail)
		require.Equal(t, "ride records charge ch_unknown, which Stripe does not have", rep.Discrepancies[1].Detail)
	})

	t.Run("AmountMismatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 2)
		ride := b.rides[0]
		exec(t, b, `UPDATE rides SET amount = amount + 100 WHERE id = $1`, ride.ID)

		rep := reconcile(t, b, Config{})
		require.Equal(t, []Discrepancy{{Kind: Mismatch, ChargeID: ride.ChargeID, RideID: ride.ID}}, found(rep))
		require.Equal(t, "amount: ride 2100, charge 2000", rep.Discrepancies[0].Detail)
	})

	t.Run("RecordedChargeOfAnotherAmount", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1)
		ride := b.rides[0]
		other := charge(t, b, b.User.StripeCustomerID, 1500, nil)
		exec(t, b, `UPDATE rides SET stripe_charge_id = $2 WHERE id = $1`, ride.ID, other)

		rep := reconcile(t, b, Config{})
		// The ride disagrees with the charge it records, and the charge
		// its request made is a second one for the same ride.
		require.Equal(t, []Discrepancy{
			{Kind: Mismatch, ChargeID: other, RideID: ride.ID},
			{Kind: DoubleCharge, ChargeID: ride.ChargeID, RideID: ride.ID},
		}, found(rep))
		require.Equal(t, "amount: ride 2000, charge 1500", rep.Discrepancies[0].Detail)
	})

	t.Run("CurrencyMismatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1)
		ride := b.rides[0]
		exec(t, b, `UPDATE rides SET currency = 'eur' WHERE id = $1`, ride.ID)

		rep := reconcile(t, b, Config{})
		require.Equal(t, []Discrepancy{{Kind: Mismatch, ChargeID: ride.ChargeID, RideID: ride.ID}}, found(rep))
		require.Equal(t, "currency: ride eur, charge usd", rep.Discrepancies[0].Detail)
	})

	t.Run("CustomerMismatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 2)
		ride := b.rides[1]
		// The ride now belongs to a user whose customer did not pay for it.
		exec(t, b, `UPDATE rides SET user_id = $2 WHERE id = $1`, ride.ID, b.BadSourceUser.ID)

		rep := reconcile(t, b, Config{})
		require.Equal(t, []Discrepancy{{Kind: Mismatch, ChargeID: ride.ChargeID, RideID: ride.ID}}, found(rep))
		require.Equal(t, fmt.Sprintf("customer: ride's user %d is %s, charge %s; "+
			"request: ride's is user %d's, charge metadata names user %d's under another Idempotency-Key",
			b.BadSourceUser.ID, b.BadSourceUser.StripeCustomerID, b.User.StripeCustomerID, b.BadSourceUser.ID, b.User.ID),
			rep.Discrepancies[0].Detail)
	})

	t.Run("RideRecordsFailedCharge", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1)
		ride := b.rides[0]
		var failed string
		for _, c := range b.Stripe.Charges() {
			if c.Status == "failed" {
				failed = c.ID
			}
		}
		require.NotEmpty(t, failed)
		exec(t, b, `UPDATE rides SET stripe_charge_id = $2 WHERE id = $1`, ride.ID, failed)

		rep := reconcile(t, b, Config{})
		require.Equal(t, []Discrepancy{
			{Kind: ChargeWithoutRide, ChargeID: ride.ChargeID, RideID: ride.ID},
			{Kind: Mismatch, ChargeID: failed, RideID: ride.ID},
		}, found(rep))
		require.Equal(t, fmt.Sprintf("ride records charge %s, whose status is failed", failed), rep.Discrepancies[1].Detail)
	})

	t.Run("DoubleCharge", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 3)
		ride := b.rides[1]
		second := charge(t, b, b.User.StripeCustomerID, 2000, map[string]string{
			"ride_id":            strconv.FormatInt(ride.ID, 10),
			"idempotency_key_id": keyID(t, b, ride.ID),
		})

		rep := reconcile(t, b, Config{})
		require.Equal(t, []Discrepancy{{Kind: DoubleCharge, ChargeID: second, RideID: ride.ID}}, found(rep))
		require.Equal(t, fmt.Sprintf("ride %d was already charged by %s", ride.ID, ride.ChargeID), rep.Discrepancies[0].Detail)
		require.Equal(t, "charges=4 rides=4 charge_without_ride=0 unknown_charge=0 mismatch=0 double_charge=1 lost_ride=0 restored=0", rep.String())
	})

	t.Run("UnrecordedChargeIsPendingWithinGrace", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1)
		ride := b.rides[0]
		// As if the request were between its charge and the atomic phase
		// that records it.
		exec(t, b, `UPDATE rides SET stripe_charge_id = NULL, status = 'pending' WHERE id = $1`, ride.ID)

		rep := reconcile(t, b, Config{})
		require.Empty(t, rep.Discrepancies)
		require.Equal(t, 1, rep.Pending)

		later := time.Now().Add(DefaultGrace + time.Minute)
		rep = reconcile(t, b, Config{Now: func() time.Time { return later }})
		require.Equal(t, []Discrepancy{{Kind: ChargeWithoutRide, ChargeID: ride.ChargeID, RideID: ride.ID}}, found(rep))
		require.True(t, strings.HasPrefix(rep.Discrepancies[0].Detail, fmt.Sprintf("ride %d records no charge; charged 16m", ride.ID)),
			rep.Discrepancies[0].Detail)
		require.Zero(t, rep.Pending)
	})

	t.Run("ChargesOutsideTheWindowAreNotCompared", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 2)
		exec(t, b, `UPDATE rides SET amount = 1 WHERE id = $1`, b.rides[0].ID)

		later := time.Now().Add(48 * time.Hour)
		rep := reconcile(t, b, Config{Now: func() time.Time { return later }})
		require.Equal(t, "charges=0 rides=0 charge_without_ride=0 unknown_charge=0 mismatch=0 double_charge=0 lost_ride=0 restored=0", rep.String())
	})

	t.Run("RideJustBeforeTheWindowIsComparedWithItsCharge", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1)
		ride := b.rides[0]
		exec(t, b, `UPDATE rides SET created_at = now() - interval '2 hours', amount = 999 WHERE id = $1`, ride.ID)

		rep := reconcile(t, b, Config{Window: time.Hour})
		require.Equal(t, []Discrepancy{{Kind: Mismatch, ChargeID: ride.ChargeID, RideID: ride.ID}}, found(rep))
		// The declined ride, in the window, and the old one, which only its
		// charge brought in.
		require.Equal(t, 2, rep.Rides)
	})

	t.Run("PaginatesThroughCharges", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 5)
		// The oldest ride's charge comes on the last page (Stripe lists
		// newest first): a double charge there is found only if every page
		// was read.
		ride := b.rides[0]
		second := charge(t, b, b.User.StripeCustomerID, 2000, map[string]string{"ride_id": strconv.FormatInt(ride.ID, 10)})

		rep := reconcile(t, b, Config{PageSize: 2})
		require.Equal(t, 6, rep.Charges, "successful charges over 4 pages of 2 (with the failed one)")
		require.Equal(t, []Discrepancy{{Kind: DoubleCharge, ChargeID: second, RideID: ride.ID}}, found(rep))
	})

	t.Run("RunLogsDiscrepanciesAtError", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1)
		ride := b.rides[0]
		exec(t, b, `UPDATE rides SET amount = 2500 WHERE id = $1`, ride.ID)

		logs := &syncBuffer{}
		r, err := New(&Config{
			Pool: b.Pool, Payments: b.Gateway, Interval: 10 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(logs, nil)),
		})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		require.Eventually(t, func() bool { return strings.Count(logs.String(), "Reconciled charges with rides") >= 2 },
			time.Minute, 10*time.Millisecond, "two runs: %s", logs)
		cancel()
		require.NoError(t, <-done)

		require.Contains(t, logs.String(), fmt.Sprintf(
			`level=ERROR msg="Stripe and rides disagree" kind=mismatch charge_id=%s ride_id=%d detail="amount: ride 2500, charge 2000"`,
			ride.ChargeID, ride.ID))
		require.Contains(t, logs.String(), `level=INFO msg="Reconciled charges with rides"`)
	})

	t.Run("StripeUnreachableIsAnError", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		unreachable, err := payment.New(&payment.Config{APIKey: apitest.StripeKey, BaseURL: "http://127.0.0.1:1"})
		require.NoError(t, err)
		r, err := New(&Config{Pool: b.Pool, Payments: unreachable})
		require.NoError(t, err)
		_, err = r.RunOnce(context.Background())
		require.ErrorContains(t, err, "list charges created since")
	})
}

func TestNew(t *testing.T) {
	t.Parallel()

	payments, err := payment.New(&payment.Config{APIKey: apitest.StripeKey})
	require.NoError(t, err)
	pool := &pgxpool.Pool{} // never used: New only checks that it is there
	for _, tc := range []struct {
		name   string
		config *Config
		want   string
	}{
		{"NilNeedsAPool", nil, "reconcile: Config.Pool is required"},
		{"NeedsPayments", &Config{Pool: pool}, "reconcile: Config.Payments is required"},
		{"NegativeWindow", &Config{Pool: pool, Payments: payments, Window: -time.Hour}, "reconcile: Config.Window must not be negative, got -1h0m0s"},
		{"NegativeInterval", &Config{Pool: pool, Payments: payments, Interval: -time.Hour}, "reconcile: Config.Interval must not be negative, got -1h0m0s"},
		{"NegativeGrace", &Config{Pool: pool, Payments: payments, Grace: -time.Hour}, "reconcile: Config.Grace must not be negative, got -1h0m0s"},
		{"PageTooLarge", &Config{Pool: pool, Payments: payments, PageSize: 101}, "reconcile: Config.PageSize must be between 1 and 100, got 101"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tc.config)
			require.EqualError(t, err, tc.want)
		})
	}
}

// TestCompare covers what the Stripe fake cannot produce.
func TestCompare(t *testing.T) {
	t.Parallel()

	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	chargeID := "ch_paid"
	newRide := func() *ride {
		keyID := int64(7)
		return &ride{ID: 1, Amount: 2000, Currency: "usd", StripeChargeID: &chargeID, IdempotencyKeyID: &keyID, UserID: 3, Customer: "cus_a"}
	}
	newCharge := func(id string) *charge {
		return &charge{ID: id, Amount: 2000, Currency: "usd", Customer: "cus_a", Created: now.Add(-time.Hour),
			Metadata: map[string]string{"ride_id": "1", "idempotency_key_id": "7"}, Status: "succeeded"}
	}

	t.Run("RefundedDoubleChargeIsSettled", func(t *testing.T) {
		t.Parallel()
		extra := newCharge("ch_extra")
		extra.Refunded = true
		rep := compare(snapshot{listed: []*charge{newCharge(chargeID), extra}, rides: []*ride{newRide()}}, now, DefaultGrace)
		require.Empty(t, rep.Discrepancies)
		require.Equal(t, 1, rep.Charges)
	})

	t.Run("ChargeMetadataNamingAnotherRequest", func(t *testing.T) {
		t.Parallel()
		c := newCharge(chargeID)
		c.Metadata = map[string]string{"ride_id": "2", "idempotency_key_id": "8"}
		other := newRide()
		other.ID, other.StripeChargeID = 2, nil
		rep := compare(snapshot{listed: []*charge{c}, rides: []*ride{newRide(), other}}, now, DefaultGrace)
		// Recorded on ride 1, the charge belongs to ride 1 and not to the
		// ride its metadata names.
		require.Equal(t, []Discrepancy{{
			Kind: Mismatch, ChargeID: chargeID, RideID: 1,
			Detail: "ride_id: charge metadata says 2; idempotency_key_id: ride 7, charge metadata 8",
		}}, rep.Discrepancies)
	})

	// A failover lost the ride a charge paid for, and the ride's id went
	// to another request's ride: the charge is money no ride accounts
	// for, not a double charge of the ride that now has the id.
	t.Run("ChargeOfALostRideWhoseIDWasHandedOutAgain", func(t *testing.T) {
		t.Parallel()
		identity, lost := "6f1c9a52-0000-4000-8000-000000000001", "6f1c9a52-0000-4000-8000-000000000002"
		r := newRide()
		r.KeyIdentity = &identity
		paid := newCharge(chargeID)
		paid.Metadata["idempotency_key_identity"] = identity
		orphan := newCharge("ch_lost")
		orphan.Created = now.Add(-2 * time.Hour)
		orphan.Metadata["idempotency_key_identity"] = lost
		rep := compare(snapshot{listed: []*charge{orphan, paid}, rides: []*ride{r}}, now, DefaultGrace)
		require.Equal(t, []Discrepancy{{
			Kind: ChargeWithoutRide, ChargeID: "ch_lost",
			Detail: "metadata ride_id 1 names a ride another request made (its key's identity is " + identity +
				", the charge's " + lost + "): the ride this charge paid for is gone, and its id was handed out again",
		}}, rep.Discrepancies)

		// Without identities, a key id that differs tells as much.
		legacy := newCharge("ch_legacy")
		legacy.Metadata["idempotency_key_id"] = "6"
		rep = compare(snapshot{listed: []*charge{legacy, newCharge(chargeID)}, rides: []*ride{newRide()}}, now, DefaultGrace)
		require.Len(t, rep.Discrepancies, 1)
		require.Equal(t, ChargeWithoutRide, rep.Discrepancies[0].Kind)
		require.Contains(t, rep.Discrepancies[0].Detail, "its key is 7, the charge's 6")
	})

	t.Run("RecordedChargeOutsideTheListIsFetched", func(t *testing.T) {
		t.Parallel()
		rep := compare(snapshot{rides: []*ride{newRide()}, fetched: map[string]*charge{chargeID: newCharge(chargeID)}}, now, DefaultGrace)
		require.Empty(t, rep.Discrepancies)
		require.Equal(t, 0, rep.Charges)
		require.Equal(t, 1, rep.Rides)
	})

	t.Run("TwoUnrecordedChargesForOneRide", func(t *testing.T) {
		t.Parallel()
		r := newRide()
		r.StripeChargeID = nil
		first, second := newCharge("ch_b"), newCharge("ch_a")
		second.Created = now.Add(-time.Minute)
		rep := compare(snapshot{listed: []*charge{second, first}, rides: []*ride{r}}, now, DefaultGrace)
		require.Equal(t, []Discrepancy{
			{Kind: ChargeWithoutRide, ChargeID: "ch_b", RideID: 1, Detail: "ride 1 records no charge; charged 1h0m0s ago"},
			{Kind: DoubleCharge, ChargeID: "ch_a", RideID: 1, Detail: "ride 1 was already charged by ch_b"},
		}, rep.Discrepancies)
	})

	t.Run("MalformedRideID", func(t *testing.T) {
		t.Parallel()
		c := newCharge("ch_x")
		c.Metadata["ride_id"] = "one"
		rep := compare(snapshot{listed: []*charge{c}}, now, DefaultGrace)
		require.Equal(t, []Discrepancy{{Kind: ChargeWithoutRide, ChargeID: "ch_x", Detail: `metadata ride_id "one" is not a ride id`}},
			rep.Discrepancies)
	})
}

func TestReportString(t *testing.T) {
	t.Parallel()

	rep := &Report{Charges: 120, Rides: 121, Discrepancies: []Discrepancy{
		{Kind: DoubleCharge, ChargeID: "ch_2", RideID: 9, Detail: "ride 9 was already charged by ch_1"},
		{Kind: ChargeWithoutRide, ChargeID: "ch_3", Detail: "metadata ride_id 5 names no ride"},
	}}
	require.Equal(t, "charges=120 rides=121 charge_without_ride=1 unknown_charge=0 mismatch=0 double_charge=1 lost_ride=0 restored=0", rep.String())
	require.Equal(t, "double_charge charge=ch_2 ride=9: ride 9 was already charged by ch_1", rep.Discrepancies[0].String())
	require.Equal(t, "charge_without_ride charge=ch_3: metadata ride_id 5 names no ride", rep.Discrepancies[1].String())
	require.False(t, rep.OK())
}

// syncBuffer is a bytes.Buffer that Run's goroutine can write while the
// test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
