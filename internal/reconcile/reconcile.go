// Package reconcile compares Stripe's charges with the rides table and
// reports where they disagree: charges no ride accounts for, rides whose
// charge Stripe does not have, rides and charges that disagree on amount,
// currency or customer, and rides charged twice.
//
// It is the last line of defence behind the idempotency keys. Keys make a
// double charge or a lost charge very unlikely, not impossible: a key
// reaped before its request finished, a key set aside for a human, a bug,
// a charge made by hand in the dashboard, a database that lost commits it
// had acknowledged. Reconciliation is the periodic diff against the
// foreign system that notices those before a customer does.
//
// It reports, and changes only what cannot be wrong:
//   - a paid ride whose request the database lost (its key, its ride and
//     all) is restored from the charge, whose metadata is the client's
//     request (rides.Service.Restore); a charge that does not say
//     unambiguously what to restore is reported for a person;
//   - a recorded charge gets the ride's id in its metadata, an update that
//     cannot charge, for whoever reads Stripe's dashboard.
//
// What to refund, or to record by hand, is a person's decision.
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
	"github.com/rocketrides/rocketrides/internal/rides"
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
	// Payments is how Stripe is read, and a recorded charge's metadata
	// given its ride's id. Required. Its API key may be a restricted key
	// with read access to charges and write access to their metadata.
	Payments *payment.Gateway
	// Rides restores the paid rides whose requests the database lost.
	// Nil restores nothing: each is reported as a lost ride.
	Rides *rides.Service

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
	rides    *rides.Service
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
		rides:    config.Rides,
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
	var (
		rideIDs  []int64
		requests []request
	)
	chargeIDs := make([]string, 0, len(listed))
	customerSet := make(map[string]bool)
	for _, c := range listed {
		// Failed charges too: a ride that records one is a mismatch.
		chargeIDs = append(chargeIDs, c.ID)
		req, named := requestOf(c)
		if named && (c.TookMoney() || c.Declined()) {
			requests = append(requests, req)
		}
		if !c.TookMoney() {
			continue
		}
		if id, err := strconv.ParseInt(c.Metadata[metadataRideID], 10, 64); !named && err == nil {
			rideIDs = append(rideIDs, id)
		}
		if c.Customer != "" {
			customerSet[c.Customer] = true
		}
	}
	known, err := r.loadRequests(ctx, requests)
	if err != nil {
		return nil, err
	}
	for _, k := range known {
		if k.RideID != nil {
			rideIDs = append(rideIDs, *k.RideID)
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

	rep := compare(snapshot{listed: listed, rides: rides, customers: customers, fetched: fetched, requests: known}, until, r.grace)
	rep.Since, rep.Until = since, until
	r.restore(ctx, rep, listed)
	r.tag(ctx, rep, rides, listed, fetched)
	return rep, nil
}

// restore restores the ride of each charge rep reports as a lost ride,
// where the charge says unambiguously what to restore (rides.Service.Restore).
// A restored ride is no longer a discrepancy: rep lists it among the
// restorations instead. One the charge cannot restore stays, saying why;
// one whose request turns out to be in the database after all (a retry
// made it again since the rides were read) is left to the next run.
func (r *Reconciler) restore(ctx context.Context, rep *Report, listed []*charge) {
	if r.rides == nil {
		return
	}
	byID := make(map[string]*charge, len(listed))
	for _, c := range listed {
		byID[c.ID] = c
	}
	kept := rep.Discrepancies[:0]
	for _, d := range rep.Discrepancies {
		if d.Kind != LostRide {
			kept = append(kept, d)
			continue
		}
		rideID, err := r.rides.Restore(ctx, byID[d.ChargeID])
		var refused *rides.NotRestorableError
		switch {
		case err == nil:
			rep.Restored = append(rep.Restored, Restoration{ChargeID: d.ChargeID, RideID: rideID})
		case errors.Is(err, rides.ErrNotLost):
			rep.Pending++
		case errors.As(err, &refused):
			d.Detail += "; not restored, a person decides: " + refused.Reason
			kept = append(kept, d)
		default:
			r.logger.ErrorContext(ctx, "Restore a lost ride from its charge; retrying at the next run",
				slog.String("charge_id", d.ChargeID), slog.Any("error", err))
			d.Detail += "; restoring it failed: " + err.Error()
			kept = append(kept, d)
		}
	}
	rep.Discrepancies = kept
}

// tag gives each charge that a ride records, and that does not name the
// ride yet, the ride's id in its metadata: the charge's own request holds
// nothing the database drew (rides.ChargeRequest), and the dashboard's
// reader wants the ride. An update of a charge's metadata cannot charge.
// A tag that fails is logged and tried again at the next run.
func (r *Reconciler) tag(ctx context.Context, rep *Report, recorded []*ride, listed []*charge, fetched map[string]*charge) {
	charges := make(map[string]*charge, len(listed)+len(fetched))
	for _, c := range listed {
		charges[c.ID] = c
	}
	for id, c := range fetched {
		if c != nil {
			charges[id] = c
		}
	}
	for _, rd := range recorded {
		if rd.StripeChargeID == nil {
			continue
		}
		c := charges[*rd.StripeChargeID]
		want := strconv.FormatInt(rd.ID, 10)
		if c == nil || !c.TookMoney() || c.Metadata[metadataRideID] == want {
			continue
		}
		if err := r.payments.AddMetadata(ctx, c.ID, map[string]string{metadataRideID: want}); err != nil {
			r.logger.WarnContext(ctx, "Add the ride's id to its charge; retrying at the next run",
				slog.String("charge_id", c.ID), slog.Int64("ride_id", rd.ID), slog.Any("error", err))
			continue
		}
		rep.Tagged++
	}
}

// request is the ride request a charge names, by its user and the
// client's Idempotency-Key (rides.ChargeRequest).
type request struct {
	UserID int64
	Key    string
}

// requestOf reads the request a charge's metadata names; ok is false for a
// charge made before charges named their requests so (its metadata names
// its ride and its key's row).
func requestOf(c *charge) (req request, ok bool) {
	userID, key, ok := rides.RequestOfCharge(c)
	return request{UserID: userID, Key: key}, ok
}

// knownRequest is what the database holds of a request a charge names:
// its key (nil when there is none: never made, or lost) or the record the
// reaper left of it, and its ride.
type knownRequest struct {
	UserID int64  `db:"user_id"`
	Key    string `db:"idempotency_key"`
	KeyID  *int64 `db:"key_id"`
	Reaped bool   `db:"reaped"`
	RideID *int64 `db:"ride_id"`
}

// loadRequests reads what the database holds of requests. Read-only
// access to idempotency_keys and reaped_keys (package idem's), for the
// reason given at loadRides.
func (r *Reconciler) loadRequests(ctx context.Context, requests []request) (map[request]knownRequest, error) {
	userIDs, keys := make([]int64, len(requests)), make([]string, len(requests))
	for i, req := range requests {
		userIDs[i], keys[i] = req.UserID, req.Key
	}
	rows, err := r.pool.Query(ctx, `
		SELECT req.user_id, req.idempotency_key, k.id AS key_id, rk.user_id IS NOT NULL AS reaped,
		       coalesce(rides.id, rk.resource_id) AS ride_id
		FROM unnest($1::bigint[], $2::text[]) AS req (user_id, idempotency_key)
		LEFT JOIN idempotency_keys k ON k.user_id = req.user_id AND k.idempotency_key = req.idempotency_key
		LEFT JOIN rides ON rides.idempotency_key_id = k.id
		LEFT JOIN reaped_keys rk ON rk.user_id = req.user_id AND rk.idempotency_key = req.idempotency_key`,
		userIDs, keys)
	if err != nil {
		return nil, fmt.Errorf("read the requests of %d charges: %w", len(requests), err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByName[knownRequest])
	if err != nil {
		return nil, fmt.Errorf("read the requests of %d charges: %w", len(requests), err)
	}
	out := make(map[request]knownRequest, len(found))
	for _, k := range found {
		out[request{UserID: k.UserID, Key: k.Key}] = k
	}
	return out, nil
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
		       idempotency_keys.idempotency_key,
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
// when ctx is cancelled is abandoned: what it changes, a restored ride or
// a charge's ride id, is changed whole or not at all, and the next run
// takes up the rest.
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

// Log logs rep: each discrepancy at ERROR, each restored ride at WARN
// (the database had lost it: worth a look, not an alert), then the
// summary at INFO.
func (r *Reconciler) Log(ctx context.Context, rep *Report) {
	for _, rs := range rep.Restored {
		r.logger.WarnContext(ctx, "Restored a paid ride the database had lost",
			slog.String("charge_id", rs.ChargeID),
			slog.Int64("ride_id", rs.RideID))
	}
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
	attrs = append(attrs, slog.Int("restored", len(rep.Restored)), slog.Int("tagged", rep.Tagged))
	// INFO even with discrepancies: each has its own ERROR line already,
	// and alerts should count those, not runs.
	r.logger.InfoContext(ctx, "Reconciled charges with rides", attrs...)
}
