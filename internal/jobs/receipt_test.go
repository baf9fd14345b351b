package jobs_test

import (
	"context"
	"errors"
	"io"
	"mime/quotedprintable"
	"net/mail"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/rocketrides/rocketrides/internal/jobs"
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
		dir, err := jobs.NewDirMailer(mailDir, jobs.DefaultFrom)
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
			INSERT INTO rides (origin_lat, origin_lon, target_lat, target_lon, amount, currency, stripe_charge_id, user_id)
			VALUES (37.77, -122.42, 37.80, -122.27, 2000, 'usd', 'ch_receipt', $1)
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

	work := func(t *testing.T, bundle *testBundle, mailer jobs.Mailer, args jobs.ReceiptArgs) error {
		t.Helper()
		w := jobs.NewReceiptWorker(bundle.pool, mailer, testLogger(t))
		return w.Work(bundle.ctx, &river.Job[jobs.ReceiptArgs]{
			JobRow: &rivertype.JobRow{ID: 1, Attempt: 1, Kind: args.Kind()},
			Args:   args,
		})
	}

	t.Run("StagedReceiptIsMailed", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		stage(t, bundle.pool, bundle.args)

		e, err := jobs.NewEnqueuer(bundle.pool, &jobs.EnqueuerConfig{Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		if moved, err := e.RunOnce(bundle.ctx); err != nil || moved != 1 {
			t.Fatalf("RunOnce = %d, %v; want 1, nil", moved, err)
		}

		client, err := jobs.NewWorkerClient(bundle.pool, bundle.mailer, testLogger(t))
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
		if len(entries) != 1 || entries[0].Name() != jobs.MessageFileName(wantID) {
			t.Fatalf("mail directory holds %v, want only %s", entries, jobs.MessageFileName(wantID))
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

	t.Run("UnknownRideIsCancelled", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		args := bundle.args
		args.RideID += 1000

		err := work(t, bundle, bundle.mailer, args)
		var cancelErr *rivertype.JobCancelError
		if !errors.As(err, &cancelErr) {
			t.Fatalf("Work = %v, want a job cancellation", err)
		}
		if n := bundle.mailer.sent.Load(); n != 0 {
			t.Errorf("receipts sent = %d, want 0", n)
		}
	})
}

func TestFormatAmount(t *testing.T) {
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
}

func TestDirMailer(t *testing.T) {
	t.Parallel()

	t.Run("SameMessageIDReplacesTheFile", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "nested", "mail")
		mailer, err := jobs.NewDirMailer(dir, jobs.DefaultFrom)
		if err != nil {
			t.Fatal(err)
		}
		msg := &jobs.Message{
			ID:      jobs.ReceiptMessageID(42),
			To:      "rider@example.com",
			Subject: jobs.ReceiptSubject,
			Date:    time.Now(),
			Body:    "first",
		}
		if err := mailer.Send(t.Context(), msg); err != nil {
			t.Fatal(err)
		}
		msg.Body = "second"
		if err := mailer.Send(t.Context(), msg); err != nil {
			t.Fatal(err)
		}

		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 {
			t.Fatalf("mail directory holds %d files, want 1 (no temporary files left either)", len(entries))
		}
		if _, body := readMessage(t, filepath.Join(dir, entries[0].Name())); !strings.Contains(body, "second") {
			t.Errorf("body = %q, want the later send", body)
		}
	})

	t.Run("RejectsBadSender", func(t *testing.T) {
		t.Parallel()
		if _, err := jobs.NewDirMailer(t.TempDir(), "not an address"); err == nil {
			t.Fatal("NewDirMailer accepted a malformed sender")
		}
	})
}

// countingMailer counts the messages it delivers.
type countingMailer struct {
	jobs.Mailer
	sent atomic.Int64
}

func (m *countingMailer) Send(ctx context.Context, msg *jobs.Message) error {
	if err := m.Mailer.Send(ctx, msg); err != nil {
		return err
	}
	m.sent.Add(1)
	return nil
}

var errMailDown = errors.New("mail server unavailable")

type failingMailer struct{}

func (failingMailer) Send(context.Context, *jobs.Message) error { return errMailDown }

// readMessage parses an .eml file and returns it with its decoded body.
func readMessage(t *testing.T, path string) (*mail.Message, string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	msg, err := mail.ReadMessage(f)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	var r io.Reader = msg.Body
	if strings.EqualFold(msg.Header.Get("Content-Transfer-Encoding"), "quoted-printable") {
		r = quotedprintable.NewReader(r)
	}
	body, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read body of %s: %v", path, err)
	}
	return msg, string(body)
}
