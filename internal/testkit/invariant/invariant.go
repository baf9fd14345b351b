// Package invariant checks the promise the idempotency-keys design makes,
// against what Postgres and Stripe actually hold after the fact, however
// many crashes, retries and faults came before:
//
//   - every request that finished with a 201 charged its customer exactly
//     once, and its ride records that charge;
//   - no money moved without a ride: every successful charge names, in its
//     metadata, a ride that records it, at the ride's price;
//   - no request is wedged: each is finished, or still resumable by a
//     retry or the completer (not locked by a request that no longer runs,
//     not set aside for a human unless the caller expects that);
//   - every paid ride has exactly one receipt job, staged or in River, and
//     at most one receipt sent (exactly one once the worker has drained).
//
// Stripe is read through its list API with stripe-go, so the same check
// runs against the local fake or a Stripe test account. It is an auditor:
// it reads other packages' tables directly on purpose, because checking
// the system through the code under test would share that code's bugs.
package invariant

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/jobs"
	"github.com/rocketrides/rocketrides/internal/rides"
)

// Options tune what counts as a violation. The zero value is the strictest
// check, for a system that has been drained: nothing runs, and every key
// must be finished.
type Options struct {
	// AllowUnfinished accepts unfinished keys as long as they are
	// resumable: not held by a live lock and not set aside for a human.
	// Check still assumes nothing is running, so a live lock counts as
	// wedged.
	AllowUnfinished bool

	// AllowAttention accepts keys set aside for a human (attention_reason),
	// for tests that provoke exactly that.
	AllowAttention bool

	// ReceiptsDrained requires a sent receipt for every paid ride: the
	// enqueuer and the worker have run to the end.
	ReceiptsDrained bool

	// LockTimeout is the processes' IDEMPOTENCY_LOCK_TIMEOUT: a lock
	// younger than this is live. Zero means idem.DefaultLockTimeout.
	LockTimeout time.Duration

	// PageSize is how many charges each Stripe list request asks for
	// (1-100). Zero means 100.
	PageSize int64
}

// NewStripeClient returns a stripe-go client for the Stripe API at baseURL
// (the fake's http://127.0.0.1:port; empty for api.stripe.com) with a
// secret key. It retries network failures itself, as reading is safe to
// repeat.
//
// It is built here, not by package payment, on purpose: an independent
// view of Stripe, so that a bug in payment cannot hide itself.
func NewStripeClient(baseURL, apiKey string) *client.API {
	cfg := &stripe.BackendConfig{
		MaxNetworkRetries: stripe.Int64(3),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		EnableTelemetry:   stripe.Bool(false),
	}
	if baseURL != "" {
		cfg.URL = stripe.String(baseURL)
	}
	return client.New(apiKey, &stripe.Backends{API: stripe.GetBackendWithConfig(stripe.APIBackend, cfg)})
}

// Check reads the database behind pool and the Stripe account behind sc
// and reports every broken promise. Only the charges of the database's
// users' Stripe customers are looked at, so other data in a shared Stripe
// account is left alone. The error is for failing to read, not for
// violations, which are in the Report.
func Check(ctx context.Context, pool *pgxpool.Pool, sc *client.API, opts Options) (Report, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = idem.DefaultLockTimeout
	}
	if opts.PageSize <= 0 || opts.PageSize > 100 {
		opts.PageSize = 100
	}
	st, err := load(ctx, pool, opts.LockTimeout)
	if err != nil {
		return Report{}, err
	}
	for _, customer := range st.customers {
		charges, err := listCharges(ctx, sc, customer, opts.PageSize)
		if err != nil {
			return Report{}, err
		}
		st.charges = append(st.charges, charges...)
	}
	return st.check(opts), nil
}

// charge is what Check needs of a Stripe charge.
type charge struct {
	ID       string
	Amount   int64
	Currency string
	Status   string
	RideID   string // metadata ride_id: on older charges from the start, on newer ones once recorded
	KeyID    string // metadata idempotency_key_id, on older charges
	Identity string // metadata idempotency_key_identity, on older keys that have one
	// The request a newer charge names (rides.ChargeRequest): metadata
	// user_id and idempotency_key.
	UserID    string
	Key       string
	Customer  string
	Succeeded bool
}

func listCharges(ctx context.Context, sc *client.API, customer string, pageSize int64) ([]charge, error) {
	params := &stripe.ChargeListParams{Customer: stripe.String(customer)}
	params.Context = ctx
	params.Limit = stripe.Int64(pageSize)
	// The iterator follows has_more with starting_after, page by page.
	iter := sc.Charges.List(params)
	var out []charge
	for iter.Next() {
		c := iter.Charge()
		ch := charge{
			ID:        c.ID,
			Amount:    c.Amount,
			Currency:  string(c.Currency),
			Status:    string(c.Status),
			RideID:    c.Metadata["ride_id"],
			KeyID:     c.Metadata["idempotency_key_id"],
			Identity:  c.Metadata["idempotency_key_identity"],
			UserID:    c.Metadata[rides.MetadataUserID],
			Key:       c.Metadata[rides.MetadataIdempotencyKey],
			Customer:  customer,
			Succeeded: c.Status == stripe.ChargeStatusSucceeded,
		}
		out = append(out, ch)
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("list Stripe charges of customer %s: %w", customer, err)
	}
	return out, nil
}

// key is a row of idempotency_keys, as Check sees it.
type key struct {
	ID              int64              `db:"id"`
	UserID          int64              `db:"user_id"`
	RecoveryPoint   idem.RecoveryPoint `db:"recovery_point"`
	Locked          bool               `db:"locked"`
	LockLive        bool               `db:"lock_live"`
	ResponseCode    *int               `db:"response_code"`
	ResponseBody    []byte             `db:"response_body"`
	AttentionReason *string            `db:"attention_reason"`
	Identity        *string            `db:"identity"`
	IdempotencyKey  string             `db:"idempotency_key"`
}

// ride is a row of rides.
type ride struct {
	ID               int64        `db:"id"`
	IdempotencyKeyID *int64       `db:"idempotency_key_id"`
	UserID           int64        `db:"user_id"`
	Amount           int64        `db:"amount"`
	Currency         string       `db:"currency"`
	StripeChargeID   *string      `db:"stripe_charge_id"`
	Status           rides.Status `db:"status"`
}

type rideCount struct {
	RideID int64 `db:"ride_id"`
	N      int   `db:"n"`
}

// state is everything Check read.
type state struct {
	keys         []*key
	rides        []*ride
	customers    []string
	stagedJobs   map[int64]int
	riverJobs    map[int64]int
	receipts     map[int64]int
	abandonedIDs map[int64]bool
	charges      []charge
}

func load(ctx context.Context, pool *pgxpool.Pool, lockTimeout time.Duration) (*state, error) {
	// One repeatable-read snapshot, so rows written while Check reads
	// cannot make consistent data look broken.
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("begin snapshot: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	st := &state{}
	if st.keys, err = collect[key](ctx, tx, `
		SELECT id, user_id, recovery_point, locked_at IS NOT NULL AS locked,
		       coalesce(locked_at > now() - make_interval(secs => $1), false) AS lock_live,
		       response_code, response_body, attention_reason, identity::text AS identity, idempotency_key
		FROM idempotency_keys ORDER BY id`, lockTimeout.Seconds()); err != nil {
		return nil, fmt.Errorf("read idempotency keys: %w", err)
	}
	if st.rides, err = collect[ride](ctx, tx, `
		SELECT id, idempotency_key_id, user_id, amount, currency, stripe_charge_id, status
		FROM rides ORDER BY id`); err != nil {
		return nil, fmt.Errorf("read rides: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT DISTINCT stripe_customer_id FROM users ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("read users: %w", err)
	}
	if st.customers, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return nil, fmt.Errorf("read users: %w", err)
	}
	kind := jobs.ReceiptArgs{}.Kind()
	if st.stagedJobs, err = counts(ctx, tx, `
		SELECT (job_args->>'ride_id')::bigint AS ride_id, count(*)::int AS n
		FROM staged_jobs WHERE job_name = $1 GROUP BY 1`, kind); err != nil {
		return nil, fmt.Errorf("read staged jobs: %w", err)
	}
	if st.riverJobs, err = counts(ctx, tx, `
		SELECT (args->>'ride_id')::bigint AS ride_id, count(*)::int AS n
		FROM river_job WHERE kind = $1 GROUP BY 1`, kind); err != nil {
		return nil, fmt.Errorf("read River jobs: %w", err)
	}
	if st.receipts, err = counts(ctx, tx, `
		SELECT ride_id, count(*)::int AS n FROM ride_receipts GROUP BY 1`); err != nil {
		return nil, fmt.Errorf("read receipts: %w", err)
	}
	rows, err = tx.Query(ctx, `SELECT idempotency_key_id FROM abandoned_requests`)
	if err != nil {
		return nil, fmt.Errorf("read abandoned requests: %w", err)
	}
	abandoned, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("read abandoned requests: %w", err)
	}
	st.abandonedIDs = map[int64]bool{}
	for _, id := range abandoned {
		st.abandonedIDs[id] = true
	}
	return st, nil
}

func collect[T any](ctx context.Context, tx pgx.Tx, sql string, args ...any) ([]*T, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToAddrOfStructByNameLax[T])
}

func counts(ctx context.Context, tx pgx.Tx, sql string, args ...any) (map[int64]int, error) {
	rows, err := collect[rideCount](ctx, tx, sql, args...)
	if err != nil {
		return nil, err
	}
	m := make(map[int64]int, len(rows))
	for _, r := range rows {
		m[r.RideID] = r.N
	}
	return m, nil
}
