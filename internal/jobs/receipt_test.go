package jobs_test

import (
	"context"
	"errors"
	"io"
	"mime/quotedprintable"
	netmail "net/mail"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/rocketrides/rocketrides/internal/jobs"
	"github.com/rocketrides/rocketrides/internal/platform/mail"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
)

func TestReceiptWorker(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		ctx     context.Context
		pool    *pgxpool.Pool
		mailDir string
		mailer  *countingMailer
		args    jobs.ReceiptArgs // a charged ride's receipt
		email   string
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		ctx := t.Context()
		pool := dbtest.New(t)
		mailDir := filepath.Join(t.TempDir(), "mail")
		dir, err := mail.NewDir(&mail.DirConfig{Dir: mailDir, From: jobs.DefaultReceiptFrom})
		if err != nil {
			t.Fatal(err)
		}

		const email = "rider@example.com"
		var userID, rideID int64
		if err := pool.QueryRow(ctx, `
			INSERT INTO users (email, stripe_customer_id, api_token_hash)
			VALUES ($1, 'cus_rider', sha256('rider-token'))
			RETURNING id`, email,
		).Scan(&userID); err != nil {
			t.Fatalf("insert user: %v", err)
		}
		if err := pool.QueryRow(ctx, `
			INSERT INTO rides (origin_lat, origin_lon, target_lat, target_lon, amount, currency, stripe_charge_id, status, user_id)
			VALUES (37.77, -122.42, 37.80, -122.27, 2000, 'usd', 'ch_receipt', 'succeeded', $1)
			RETURNING id`, userID,
		).Scan(&rideID); err != nil {
			t.Fatalf("insert ride: %v", err)
		}

		return &testBundle{
			ctx:     ctx,
			pool:    pool,
			mailDir: mailDir,
			mailer:  &countingMailer{Mailer: dir},
			args: jobs.ReceiptArgs{
				RideID: rideID, UserID: userID, Amount: 20_00, Currency: "usd", StripeChargeID: "ch_receipt",
			},
			email: email,
		}
	}

	work := func(t *testing.T, bundle *testBundle, mailer mail.Mailer, args jobs.ReceiptArgs) error {
		t.Helper()
		w, err := jobs.NewReceiptWorker(&jobs.ReceiptWorkerConfig{Pool: bundle.pool, Mailer: mailer, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		return w.Work(bundle.ctx, &river.Job[jobs.ReceiptArgs]{
			JobRow: &rivertype.JobRow{ID: 1, Attempt: 1, Kind: args.Kind()},
			Args:   args,
		})
	}

	t.Run("StagedReceiptIsMailed", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		stage(t, bundle.pool, bundle.args)

		e, err := jobs.NewEnqueuer(&jobs.EnqueuerConfig{Pool: bundle.pool, Kinds: jobs.Kinds(), Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		if moved, err := e.RunOnce(bundle.ctx); err != nil || moved != 1 {
			t.Fatalf("RunOnce = %d, %v; want 1, nil", moved, err)
		}

		client, err := jobs.NewClient(&jobs.ClientConfig{Pool: bundle.pool, Mailer: bundle.mailer, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(bundle.ctx, 30*time.Second)
		defer cancel()
		worked, err := jobs.WorkAvailable(ctx, client)
		if err != nil {
			t.Fatalf("WorkAvailable: %v", err)
		}
		if worked != 1 {
			t.Errorf("worked = %d, want 1", worked)
		}
		var state string
		if err := bundle.pool.QueryRow(bundle.ctx, `SELECT state::text FROM river_job`).Scan(&state); err != nil {
			t.Fatal(err)
		}
		if state != "completed" {
			t.Errorf("receipt job state = %s, want completed", state)
		}

		entries, err := os.ReadDir(bundle.mailDir)
		if err != nil {
			t.Fatal(err)
		}
		wantID := jobs.ReceiptMessageID(bundle.args.RideID)
		if len(entries) != 1 || entries[0].Name() != mail.FileName(wantID) {
			t.Fatalf("mail directory holds %v, want only %s", entries, mail.FileName(wantID))
		}
		msg, body := readMessage(t, filepath.Join(bundle.mailDir, entries[0].Name()))
		if got := msg.Header.Get("Message-ID"); got != "<"+wantID+">" {
			t.Errorf("Message-ID = %q, want <%s>", got, wantID)
		}
		if got := msg.Header.Get("To"); !strings.Contains(got, bundle.email) {
			t.Errorf("To = %q, want %s", got, bundle.email)
		}
		if got := msg.Header.Get("Subject"); got != jobs.ReceiptSubject {
			t.Errorf("Subject = %q, want %q", got, jobs.ReceiptSubject)
		}
		if got := msg.Header.Get("From"); !strings.Contains(got, "receipts@rocketrides.local") {
			t.Errorf("From = %q, want the default sender", got)
		}
		if _, err := msg.Header.Date(); err != nil {
			t.Errorf("Date header: %v", err)
		}
		for _, want := range []string{"$20.00 USD", "ch_receipt", "#" + strconv.FormatInt(bundle.args.RideID, 10)} {
			if !strings.Contains(body, want) {
				t.Errorf("body lacks %q:\n%s", want, body)
			}
		}

		var recipient, messageID string
		if err := bundle.pool.QueryRow(bundle.ctx,
			`SELECT recipient, message_id FROM ride_receipts WHERE ride_id = $1`, bundle.args.RideID,
		).Scan(&recipient, &messageID); err != nil {
			t.Fatalf("read ride_receipts: %v", err)
		}
		if recipient != bundle.email || messageID != wantID {
			t.Errorf("ride_receipts row = %s, %s; want %s, %s", recipient, messageID, bundle.email, wantID)
		}
	})

	t.Run("WorkingTwiceSendsOnce", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		for attempt := 1; attempt <= 2; attempt++ {
			if err := work(t, bundle, bundle.mailer, bundle.args); err != nil {
				t.Fatalf("attempt %d: %v", attempt, err)
			}
		}
		if n := bundle.mailer.sent.Load(); n != 1 {
			t.Errorf("receipts sent = %d, want 1", n)
		}
		if n := countRows(t, bundle.pool, "ride_receipts"); n != 1 {
			t.Errorf("ride_receipts rows = %d, want 1", n)
		}
	})

	// A record of another charge's receipt under the ride's id (another
	// ride's, from the other primary of a split brain) does not stand for
	// this one's.
	t.Run("AnotherChargesRecordDoesNotStopTheSend", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		if _, err := bundle.pool.Exec(bundle.ctx, `
			INSERT INTO ride_receipts (ride_id, stripe_charge_id, message_id, recipient)
			VALUES ($1, 'ch_other_timeline', 'other@rocketrides.local', 'someone@example.com')`, bundle.args.RideID); err != nil {
			t.Fatal(err)
		}
		if err := work(t, bundle, bundle.mailer, bundle.args); err != nil {
			t.Fatal(err)
		}
		if n := bundle.mailer.sent.Load(); n != 1 {
			t.Errorf("receipts sent = %d, want 1", n)
		}
	})

	t.Run("FailedSendIsRetried", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		err := work(t, bundle, failingMailer{}, bundle.args)
		if !errors.Is(err, errMailDown) {
			t.Fatalf("Work = %v, want the mailer's error", err)
		}
		if n := countRows(t, bundle.pool, "ride_receipts"); n != 0 {
			t.Fatalf("a failed send was recorded as sent")
		}

		if err := work(t, bundle, bundle.mailer, bundle.args); err != nil {
			t.Fatalf("retry: %v", err)
		}
		if n := bundle.mailer.sent.Load(); n != 1 {
			t.Errorf("receipts sent on retry = %d, want 1", n)
		}
	})

	// A ride not found may have been read from the other primary of a
	// split brain: tried again a few times, then cancelled.
	t.Run("UnknownRideIsRetriedThenCancelled", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		args := bundle.args
		args.RideID += 1000

		err := work(t, bundle, bundle.mailer, args)
		var cancelErr *rivertype.JobCancelError
		if err == nil || errors.As(err, &cancelErr) {
			t.Fatalf("Work at attempt 1 = %v, want an error River retries", err)
		}
		w, werr := jobs.NewReceiptWorker(&jobs.ReceiptWorkerConfig{Pool: bundle.pool, Mailer: bundle.mailer, Logger: testLogger(t)})
		if werr != nil {
			t.Fatal(werr)
		}
		err = w.Work(bundle.ctx, &river.Job[jobs.ReceiptArgs]{
			JobRow: &rivertype.JobRow{ID: 1, Attempt: 5, Kind: args.Kind()},
			Args:   args,
		})
		if !errors.As(err, &cancelErr) {
			t.Fatalf("Work at attempt 5 = %v, want a job cancellation", err)
		}
		if n := bundle.mailer.sent.Load(); n != 0 {
			t.Errorf("receipts sent = %d, want 0", n)
		}
	})
}

func TestFormatAmount(t *testing.T) {
	t.Parallel()

	t.Run("Formats", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			amount   int64
			currency string
			want     string
		}{
			{20_00, "usd", "$20.00 USD"},
			{5, "usd", "$0.05 USD"},
			{1234_56, "eur", "€1234.56 EUR"},
			{500, "jpy", "¥500 JPY"},
			{99_90, "chf", "99.90 CHF"},
		} {
			if got := jobs.FormatAmount(tc.amount, tc.currency); got != tc.want {
				t.Errorf("FormatAmount(%d, %q) = %q, want %q", tc.amount, tc.currency, got, tc.want)
			}
		}
	})

	// A receipt's amount and currency are the ride's, as rides returned
	// them (staged by the ride's last phase). FormatAmount handles neither
	// a sign nor upper case because rides cannot hold them.
	t.Run("RidesHoldOnlyPositiveAmountsInLowerCase", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.New(t)
		var userID int64
		if err := pool.QueryRow(ctx, `
			INSERT INTO users (email, stripe_customer_id, api_token_hash)
			VALUES ('amounts@example.com', 'cus_amounts', sha256('amounts-token'))
			RETURNING id`,
		).Scan(&userID); err != nil {
			t.Fatalf("insert user: %v", err)
		}
		insertRide := func(amount int64, currency string) error {
			_, err := pool.Exec(ctx, `
				INSERT INTO rides (origin_lat, origin_lon, target_lat, target_lon, amount, currency, user_id)
				VALUES (37.77, -122.42, 37.80, -122.27, $1, $2, $3)`, amount, currency, userID)
			return err
		}
		for _, tc := range []struct {
			amount     int64
			currency   string
			constraint string
		}{
			{-20_00, "usd", "amount_check"},
			{0, "usd", "amount_check"},
			{20_00, "USD", "currency_check"},
			{20_00, "Usd", "currency_check"},
		} {
			err := insertRide(tc.amount, tc.currency)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "23514" || pgErr.ConstraintName != tc.constraint {
				t.Errorf("ride of %d %q: err = %v, want check_violation of %s", tc.amount, tc.currency, err, tc.constraint)
			}
		}
		if err := insertRide(1, "usd"); err != nil {
			t.Errorf("ride of 1 usd: %v", err)
		}
	})
}

// countingMailer counts the messages it delivers.
type countingMailer struct {
	mail.Mailer
	sent atomic.Int64
}

func (m *countingMailer) Send(ctx context.Context, msg *mail.Message) error {
	if err := m.Mailer.Send(ctx, msg); err != nil {
		return err
	}
	m.sent.Add(1)
	return nil
}

var errMailDown = errors.New("mail server unavailable")

type failingMailer struct{}

func (failingMailer) Send(context.Context, *mail.Message) error { return errMailDown }

// readMessage parses an .eml file and returns it with its decoded body.
func readMessage(t *testing.T, path string) (*netmail.Message, string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	msg, err := netmail.ReadMessage(f)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	r := msg.Body
	if strings.EqualFold(msg.Header.Get("Content-Transfer-Encoding"), "quoted-printable") {
		r = quotedprintable.NewReader(r)
	}
	body, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read body of %s: %v", path, err)
	}
	return msg, string(body)
}

func TestWorkerConfig(t *testing.T) {
	t.Parallel()

	t.Run("WorkerRefusesMissingDependencies", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.New(t)
		for _, tc := range []struct {
			config *jobs.ReceiptWorkerConfig
			field  string
		}{
			{nil, "ReceiptWorkerConfig.Pool"},
			{&jobs.ReceiptWorkerConfig{Mailer: failingMailer{}}, "ReceiptWorkerConfig.Pool"},
			{&jobs.ReceiptWorkerConfig{Pool: pool}, "ReceiptWorkerConfig.Mailer"},
		} {
			_, err := jobs.NewReceiptWorker(tc.config)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("NewReceiptWorker(%+v) = %v, want an error naming %s", tc.config, err, tc.field)
			}
		}
	})

	t.Run("ClientRefusesBadConfig", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.New(t)
		for _, tc := range []struct {
			config *jobs.ClientConfig
			field  string
		}{
			{nil, "ClientConfig.Pool"},
			{&jobs.ClientConfig{Mailer: failingMailer{}}, "ClientConfig.Pool"},
			{&jobs.ClientConfig{Pool: pool}, "ClientConfig.Mailer"},
			{&jobs.ClientConfig{Pool: pool, Mailer: failingMailer{}, MaxWorkers: -1}, "ClientConfig.MaxWorkers"},
		} {
			_, err := jobs.NewClient(tc.config)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("NewClient(%+v) = %v, want an error naming %s", tc.config, err, tc.field)
			}
		}
	})
}
