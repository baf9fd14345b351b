// Package reconcile compares Stripe's charges with the rides table and
// reports where they disagree: charges no ride accounts for, rides whose
// charge Stripe does not have, rides and charges that disagree on amount,
// currency or customer, and rides charged twice.
//
// It is the last line of defence behind the idempotency keys. Keys make a
// double charge or a lost charge very unlikely, not impossible: a key
// reaped before its request finished, a key set aside for a human, a bug,
// a charge made by hand in the dashboard. Reconciliation is the periodic
// diff against the foreign system that notices those before a customer
// does. It only reads and reports; what to refund or record is a person's
// decision.
package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketrides/rocketrides/internal/payment"
)

// Defaults of Config.
const (
	DefaultWindow   = 24 * time.Hour
	DefaultInterval = time.Hour
	DefaultGrace    = 15 * time.Minute
	DefaultPageSize = 100
)

// Config configures a Reconciler.
type Config struct {
	// Pool is the Rocket Rides database. Only read. Required.
	Pool *pgxpool.Pool
	// Payments is how Stripe is read. Required. Its API key may be a
	// restricted key with read access to charges.
	Payments *payment.Gateway

	// Window is how far back a run looks: charges and rides created in the
	// last Window are compared. Zero means DefaultWindow.
	Window time.Duration
	// Interval is the time between runs in Run. Zero means
	// DefaultInterval.
	Interval time.Duration
	// Grace is how long a charge may go unrecorded by the ride it names
	// before it is reported: until its request's last atomic phase has
	// run (or the completer has finished it), a ride without its charge
	// is normal. Zero means DefaultGrace.
	Grace time.Duration
	// PageSize is the number of charges asked for per list request, at
	// most 100. Zero means DefaultPageSize.
	PageSize int64

	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c *Config) validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("reconcile: Config.Pool is required")
	case c.Payments == nil:
		return errors.New("reconcile: Config.Payments is required")
	case c.Window < 0:
		return fmt.Errorf("reconcile: Config.Window must not be negative, got %s", c.Window)
	case c.Interval < 0:
		return fmt.Errorf("reconcile: Config.Interval must not be negative, got %s", c.Interval)
	case c.Grace < 0:
		return fmt.Errorf("reconcile: Config.Grace must not be negative, got %s", c.Grace)
	case c.PageSize < 0 || c.PageSize > 100:
		return fmt.Errorf("reconcile: Config.PageSize must be between 1 and 100, got %d", c.PageSize)
	}
	return nil
}

// Reconciler compares Stripe's charges with the rides table.
type Reconciler struct {
	pool     *pgxpool.Pool
	payments *payment.Gateway
	window   time.Duration
	interval time.Duration
	grace    time.Duration
	pageSize int64
	now      func() time.Time
	logger   *slog.Logger
}

// New returns a Reconciler for config.
func New(config *Config) (*Reconciler, error) {
	if config == nil {
		config = &Config{}
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	now := config.Now
	if now == nil {
		now = time.Now
	}
	return &Reconciler{
		pool:     config.Pool,
		payments: config.Payments,
		window:   cmp.Or(config.Window, DefaultWindow),
		interval: cmp.Or(config.Interval, DefaultInterval),
		grace:    cmp.Or(config.Grace, DefaultGrace),
		pageSize: cmp.Or(config.PageSize, DefaultPageSize),
		now:      now,
		logger:   cmp.Or(config.Logger, slog.Default()),
	}, nil
}

// RunOnce reconciles the last Window once. An error means the comparison
// could not be made (Stripe or the database unreachable); it is never
// half a report.
func (r *Reconciler) RunOnce(ctx context.Context) (*Report, error) {
	until := r.now()
	since := until.Add(-r.window)

	// Charges first, rides second: a ride that records its charge after
	// the list was taken is still read with its charge id, and that charge
	// is then fetched by id below instead of being taken for missing.
	listed, err := r.payments.ListCharges(ctx, since, until, r.pageSize)
	if err != nil {
		return nil, fmt.Errorf("list charges created since %s: %w", since.UTC().Format(time.RFC3339), err)
	}
	var rideIDs []int64
	chargeIDs := make([]string, 0, len(listed))
	customerSet := make(map[string]bool)
	for _, c := range listed {
		// Failed charges too: a ride that records one is a mismatch.
		chargeIDs = append(chargeIDs, c.ID)
		if !tookMoney(c) {
			continue
		}
		if id, err := strconv.ParseInt(c.Metadata[metadataRideID], 10, 64); err == nil {
			rideIDs = append(rideIDs, id)
		}
		if c.Customer != "" {
			customerSet[c.Customer] = true
		}
	}
	rides, err := r.loadRides(ctx, since, rideIDs, chargeIDs)
	if err != nil {
		return nil, err
	}
	customers, err := r.loadCustomers(ctx, slices.Sorted(maps.Keys(customerSet)))
	if err != nil {
		return nil, err
	}

	listedIDs := make(map[string]bool, len(listed))
	for _, c := range listed {
		listedIDs[c.ID] = true
	}
	fetched := make(map[string]*charge)
	for _, rd := range rides {
		if rd.StripeChargeID == nil || listedIDs[*rd.StripeChargeID] {
			continue
		}
		c, _, err := r.payments.GetCharge(ctx, *rd.StripeChargeID)
		if err != nil {
			return nil, fmt.Errorf("look up charge %s of ride %d: %w", *rd.StripeChargeID, rd.ID, err)
		}
		fetched[*rd.StripeChargeID] = c // nil when Stripe has no such charge
	}

	rep := compare(snapshot{listed: listed, rides: rides, customers: customers, fetched: fetched}, until, r.grace)
	rep.Since, rep.Until = since, until
	return rep, nil
}

// loadRides reads the rides created since since, and those that rideIDs
// or chargeIDs name whenever they were created (a ride made just before
// the window may have been charged just inside it), with their users'
// Stripe customers.
//
// rides belongs to package rides and users to package user; this reads
// them directly, and only reads. Reconciliation is a cross-cutting audit
// that has to see both tables as they are, in one statement, including
// rows their owners' own functions would never return (another user's
// ride, a ride its request never finished); a read API in each owner for
// this one caller would only hide that SQL, not change it.
func (r *Reconciler) loadRides(ctx context.Context, since time.Time, rideIDs []int64, chargeIDs []string) ([]*ride, error) {
	rows, err := r.pool.Query(ctx, `
		SELECT rides.id, rides.created_at, rides.amount, rides.currency, rides.stripe_charge_id,
		       rides.idempotency_key_id, idempotency_keys.identity::text AS idempotency_key_identity,
		       rides.user_id, users.stripe_customer_id
		FROM rides
		JOIN users ON users.id = rides.user_id
		LEFT JOIN idempotency_keys ON idempotency_keys.id = rides.idempotency_key_id
		WHERE rides.created_at >= $1
		   OR rides.id = ANY($2)
		   OR rides.stripe_charge_id = ANY($3)
		ORDER BY rides.id`,
		since, rideIDs, chargeIDs)
	if err != nil {
		return nil, fmt.Errorf("read rides since %s: %w", since.UTC().Format(time.RFC3339), err)
	}
	rides, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByName[ride])
	if err != nil {
		return nil, fmt.Errorf("read rides since %s: %w", since.UTC().Format(time.RFC3339), err)
	}
	return rides, nil
}

// loadCustomers maps those of customers that belong to our users to the
// user, so that a charge of one of our customers is recognised as ours
// even without metadata. Read-only access to users, for the reason given
// at loadRides.
func (r *Reconciler) loadCustomers(ctx context.Context, customers []string) (map[string]int64, error) {
	type row struct {
		ID       int64  `db:"id"`
		Customer string `db:"stripe_customer_id"`
	}
	rows, err := r.pool.Query(ctx, `
		SELECT id, stripe_customer_id FROM users WHERE stripe_customer_id = ANY($1)`,
		customers)
	if err != nil {
		return nil, fmt.Errorf("read users of %d stripe customers: %w", len(customers), err)
	}
	users, err := pgx.CollectRows(rows, pgx.RowToStructByName[row])
	if err != nil {
		return nil, fmt.Errorf("read users of %d stripe customers: %w", len(customers), err)
	}
	out := make(map[string]int64, len(users))
	for _, u := range users {
		out[u.Customer] = u.ID
	}
	return out, nil
}

// Run reconciles every Interval, starting at once, until ctx is cancelled.
// Each discrepancy is logged at ERROR, where alerting looks; a run that
// fails is logged and tried again at the next interval. A run in progress
// when ctx is cancelled is abandoned: it only reads, so there is nothing
// to finish.
//
// Run returns nil once ctx is cancelled.
func (r *Reconciler) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		rep, err := r.RunOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			r.logger.ErrorContext(ctx, "Reconcile charges with rides; retrying at the next interval",
				slog.Any("error", err), slog.Duration("interval", r.interval))
		default:
			r.Log(ctx, rep)
			if err := r.Record(ctx, rep); err != nil {
				r.logger.ErrorContext(ctx, "Record reconciliation for the console", slog.Any("error", err))
			}
		}
		timer.Reset(r.interval)
	}
}

// Log logs rep: each discrepancy at ERROR, then the summary at INFO.
func (r *Reconciler) Log(ctx context.Context, rep *Report) {
	for _, d := range rep.Discrepancies {
		r.logger.ErrorContext(ctx, "Stripe and rides disagree",
			slog.String("kind", string(d.Kind)),
			slog.String("charge_id", d.ChargeID),
			slog.Int64("ride_id", d.RideID),
			slog.String("detail", d.Detail),
		)
	}
	attrs := []any{
		slog.Time("since", rep.Since),
		slog.Time("until", rep.Until),
		slog.Int("charges", rep.Charges),
		slog.Int("rides", rep.Rides),
		slog.Int("pending", rep.Pending),
	}
	for _, k := range Kinds {
		attrs = append(attrs, slog.Int(string(k), rep.Count(k)))
	}
	// INFO even with discrepancies: each has its own ERROR line already,
	// and alerts should count those, not runs.
	r.logger.InfoContext(ctx, "Reconciled charges with rides", attrs...)
}
