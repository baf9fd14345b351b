// Second reading: the receipt job. A ride's receipt is staged (Stage) in
// the atomic phase that finishes the ride request, moved into River by the
// enqueuer once that phase has committed, and mailed by ReceiptWorker,
// which records each send in ride_receipts so that a retried job does not
// mail again.

package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/rocketrides/rocketrides/internal/platform/mail"
)

// ReceiptArgs are the arguments of a send_ride_receipt job: everything a
// receipt shows, captured when the charge was recorded.
type ReceiptArgs struct {
	RideID         int64  `json:"ride_id"`
	UserID         int64  `json:"user_id"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	StripeChargeID string `json:"stripe_charge_id"`
}

// Kind is the job's name in staged_jobs and in River.
func (ReceiptArgs) Kind() string { return "send_ride_receipt" }

// InsertOpts makes a receipt job unique per set of args, and so per ride:
// every field is fixed once the ride's charge is recorded. Should a ride's
// receipt ever be staged twice, River keeps only one job while the first
// is queued, running or recently completed, so two workers never race to
// send the same receipt. The ride_receipts check in the worker is what
// stops a second send after that (see ReceiptWorker).
func (ReceiptArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// DefaultReceiptFrom is the sender of receipts unless configured otherwise.
const DefaultReceiptFrom = "Rocket Rides <receipts@rocketrides.local>"

// ReceiptSubject is the subject line of every ride receipt.
const ReceiptSubject = "Your Rocket Rides receipt"

// maxNotFoundAttempts is how many attempts a receipt job makes at a ride
// it cannot find before it is cancelled: River waits about 1 s, 16 s, 81 s
// and 4 min between them, longer than a failover takes.
const maxNotFoundAttempts = 5

// recordTimeout bounds recording a sent receipt. The record is written
// even when the job's own context has just ended: a send that is not
// recorded is sent again on retry.
const recordTimeout = 10 * time.Second

// ReceiptMessageID is the Message-ID of ride rideID's receipt. It is
// derived from the ride rather than random so that every attempt at the
// same receipt carries the same ID, and a duplicate that does get out can
// be recognised (and dropped) by whatever receives it.
func ReceiptMessageID(rideID int64) string {
	return "ride-" + strconv.FormatInt(rideID, 10) + ".receipt@rocketrides.local"
}

// ReceiptWorker mails the receipt of a charged ride.
//
// Mailing is a foreign state mutation: once an SMTP server has accepted a
// message it cannot be taken back, and River retries a job whose attempt
// failed, so the worker makes the send idempotent itself. ride_receipts
// holds one row per ride whose receipt went out, with the charge it was
// for. An attempt that finds the row of its ride and charge does nothing;
// otherwise it sends, then records the send. The charge matters where two
// primaries of a split brain handed one ride id to two rides: a worker
// that reads the other primary's row must not take the other ride's
// receipt for this one's.
//
// One window remains. If the process dies, or the database is lost, after
// the mail server accepted the message and before the row is committed,
// the retry sends the receipt a second time. It cannot be closed here:
// the send and the row cannot share a transaction, and recording before
// sending would turn the same crash into a receipt that is never sent.
// The duplicate has the same Message-ID as the original (see
// ReceiptMessageID), so mail servers and clients that deduplicate on it
// show one receipt.
//
// Two workers cannot race on one ride: ReceiptArgs are unique in River
// (see ReceiptArgs.InsertOpts), so there is only ever one job per ride to work.
type ReceiptWorker struct {
	river.WorkerDefaults[ReceiptArgs]

	pool   *pgxpool.Pool
	mailer mail.Mailer
	logger *slog.Logger
}

// ReceiptWorkerConfig configures a ReceiptWorker.
type ReceiptWorkerConfig struct {
	// Pool is the database holding rides, users and ride_receipts.
	// Required.
	Pool *pgxpool.Pool

	// Mailer delivers the receipts. Required.
	Mailer mail.Mailer

	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c *ReceiptWorkerConfig) validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("jobs: ReceiptWorkerConfig.Pool is required")
	case c.Mailer == nil:
		return errors.New("jobs: ReceiptWorkerConfig.Mailer is required")
	}
	return nil
}

// NewReceiptWorker returns a worker mailing receipts through
// config.Mailer.
func NewReceiptWorker(config *ReceiptWorkerConfig) (*ReceiptWorker, error) {
	if config == nil {
		return nil, errors.New("jobs: ReceiptWorkerConfig is required (ReceiptWorkerConfig.Pool and ReceiptWorkerConfig.Mailer)")
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	return &ReceiptWorker{pool: config.Pool, mailer: config.Mailer, logger: cmp.Or(config.Logger, slog.Default())}, nil
}

// Work sends the receipt for job's ride unless it was sent before.
func (w *ReceiptWorker) Work(ctx context.Context, job *river.Job[ReceiptArgs]) error {
	args := job.Args
	messageID := ReceiptMessageID(args.RideID)

	var sent bool
	if err := w.pool.QueryRow(ctx,
		`SELECT EXISTS (SELECT 1 FROM ride_receipts WHERE ride_id = $1 AND stripe_charge_id = $2)`,
		args.RideID, args.StripeChargeID,
	).Scan(&sent); err != nil {
		return fmt.Errorf("look up receipt of ride %d: %w", args.RideID, err)
	}
	if sent {
		w.logger.InfoContext(ctx, "Receipt already sent; not sending again",
			slog.Int64("ride_id", args.RideID), slog.String("message_id", messageID))
		return nil
	}

	// Read-only look at tables owned elsewhere: where to send, and the
	// date the receipt is for. Matching on both ids also refuses a job
	// whose user is not the ride's.
	var (
		email    string
		riddenAt time.Time
	)
	err := w.pool.QueryRow(ctx, `
		SELECT users.email, rides.created_at
		FROM rides
		JOIN users ON users.id = rides.user_id
		WHERE rides.id = $1 AND rides.user_id = $2`,
		args.RideID, args.UserID,
	).Scan(&email, &riddenAt)
	if errors.Is(err, pgx.ErrNoRows) {
		// The ride's phase staged the job, so the ride exists where the
		// job does. A read that misses it went, during a split brain, to
		// the other primary, which the pool also reaches until it is
		// demoted: try again later. Past a few attempts, retrying cannot
		// make the ride appear.
		notFound := fmt.Errorf("ride %d of user %d not found", args.RideID, args.UserID)
		if job.Attempt < maxNotFoundAttempts {
			return notFound
		}
		return river.JobCancel(notFound)
	}
	if err != nil {
		return fmt.Errorf("look up recipient of ride %d: %w", args.RideID, err)
	}

	msg := &mail.Message{
		ID:      messageID,
		To:      email,
		Subject: ReceiptSubject,
		Date:    time.Now(),
		Body:    body(args, riddenAt),
	}
	if err := w.mailer.Send(ctx, msg); err != nil {
		return fmt.Errorf("send receipt of ride %d: %w", args.RideID, err)
	}

	// The receipt is out. Record it even if ctx ends now: a cancelled
	// record is the duplicate-send window described on ReceiptWorker.
	recordCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if _, err := w.pool.Exec(recordCtx, `
		INSERT INTO ride_receipts (ride_id, stripe_charge_id, message_id, recipient)
		VALUES ($1, $2, $3, $4)
		ON CONFLICT (ride_id) DO NOTHING`,
		args.RideID, args.StripeChargeID, messageID, email,
	); err != nil {
		return fmt.Errorf("record receipt %s of ride %d as sent: %w", messageID, args.RideID, err)
	}
	w.logger.InfoContext(ctx, "Sent receipt",
		slog.Int64("ride_id", args.RideID), slog.String("message_id", messageID))
	return nil
}

func body(args ReceiptArgs, riddenAt time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Thanks for riding with Rocket Rides!\n\n")
	fmt.Fprintf(&b, "Ride:    #%d\n", args.RideID)
	fmt.Fprintf(&b, "Date:    %s\n", riddenAt.UTC().Format("2 January 2006, 15:04 MST"))
	fmt.Fprintf(&b, "Amount:  %s\n", FormatAmount(args.Amount, args.Currency))
	fmt.Fprintf(&b, "Charge:  %s\n", args.StripeChargeID)
	fmt.Fprintf(&b, "\nThis receipt was sent to you because you requested a ride.\n")
	return b.String()
}

// zeroDecimal are the currencies whose smallest unit is the unit itself,
// as Stripe lists them: 500 JPY is ¥500, not ¥5.00.
var zeroDecimal = map[string]bool{
	"bif": true, "clp": true, "djf": true, "gnf": true, "jpy": true, "kmf": true,
	"krw": true, "mga": true, "pyg": true, "rwf": true, "ugx": true, "vnd": true,
	"vuv": true, "xaf": true, "xof": true, "xpf": true,
}

var currencySymbols = map[string]string{
	"usd": "$", "cad": "$", "aud": "$", "eur": "€", "gbp": "£", "jpy": "¥",
}

// FormatAmount renders an amount in a currency's smallest unit for people:
// FormatAmount(2000, "usd") is "$20.00 USD".
//
// It takes a ride's amount and currency as rides stores them, and rides
// holds nothing else: a positive amount and a lower-case ISO 4217 code
// (its CHECKs refuse the rest), so there is no sign or case to handle.
func FormatAmount(amount int64, currency string) string {
	number := strconv.FormatInt(amount, 10)
	if !zeroDecimal[currency] {
		number = fmt.Sprintf("%d.%02d", amount/100, amount%100)
	}
	return currencySymbols[currency] + number + " " + strings.ToUpper(currency)
}

// SentReceipt is a row of ride_receipts: a receipt that went out.
type SentReceipt struct {
	RideID    int64     `db:"ride_id"`
	MessageID string    `db:"message_id"`
	Recipient string    `db:"recipient"`
	SentAt    time.Time `db:"sent_at"`
}

// ReceiptForRide returns the receipt sent for ride rideID; found is false
// when none was sent (yet).
func ReceiptForRide(ctx context.Context, pool *pgxpool.Pool, rideID int64) (sent SentReceipt, found bool, err error) {
	rows, err := pool.Query(ctx, `SELECT ride_id, message_id, recipient, sent_at FROM ride_receipts WHERE ride_id = $1`, rideID)
	if err != nil {
		return SentReceipt{}, false, fmt.Errorf("read receipt of ride %d: %w", rideID, err)
	}
	sent, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[SentReceipt])
	if errors.Is(err, pgx.ErrNoRows) {
		return SentReceipt{}, false, nil
	}
	if err != nil {
		return SentReceipt{}, false, fmt.Errorf("read receipt of ride %d: %w", rideID, err)
	}
	return sent, true, nil
}
