package rides

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/platform/failpoint"
	"github.com/rocketrides/rocketrides/internal/platform/metrics"
	"github.com/rocketrides/rocketrides/internal/ratelimit"
)

// Settings are what every process that runs ride requests, the api and
// the completer, reads from its environment. They must agree: a completer
// on another lock timeout than the api's could take over a live request,
// and one on another Stripe key retention could repeat a charge Stripe no
// longer dedupes.
type Settings struct {
	Stripe payment.Config // see payment.ConfigFromEnv
	// IDEMPOTENCY_LOCK_TIMEOUT, default idem.DefaultLockTimeout; refused
	// at or above REAPER_MAX_AGE (idem.LockTimeoutFromEnv), and so is a
	// STRIPE_TIMEOUT at or above it (payment.RefuseTimeoutPastLock).
	LockTimeout time.Duration
	// STRIPE_KEY_RETENTION, default DefaultStripeKeyRetention; 0 is
	// refused.
	StripeKeyRetention time.Duration
	// MAX_CHARGE_ATTEMPTS, default DefaultMaxChargeAttempts; 0 is
	// refused.
	MaxChargeAttempts int
	// DATABASE_ALLOW_ASYNC_REPLICATION, default false: start against a
	// database that may lose acknowledged commits (see db.Preflight).
	AllowAsyncReplication bool
	// Charges caps each user's charges (RATE_LIMIT_CHARGES per
	// RATE_LIMIT_CHARGES_WINDOW, off with RATE_LIMITS=off): the api and
	// the completer count them in the same place.
	Charges ratelimit.Policy
	// IDEMPOTENCY_PIPELINE=off, default on: the key store's plain path
	// (see idem.Config.Plain).
	Plain bool
	// Actor names the process in the steps it records on keys (see
	// idem.Config.Actor); set by the command, not read from the
	// environment. Empty means idem.DefaultActor.
	Actor string
}

// SettingsFromEnv reads Settings from env.
func SettingsFromEnv(env *config.Env) Settings {
	s := Settings{
		Stripe:             payment.ConfigFromEnv(env),
		LockTimeout:        idem.LockTimeoutFromEnv(env),
		Plain:              idem.PlainFromEnv(env),
		StripeKeyRetention: env.Duration("STRIPE_KEY_RETENTION", DefaultStripeKeyRetention),
		MaxChargeAttempts:  env.Int("MAX_CHARGE_ATTEMPTS", DefaultMaxChargeAttempts),
		// Refused by default: see db.Preflight and docs/failures.md.
		AllowAsyncReplication: env.Bool(db.AllowAsyncReplicationSetting, false),
		Charges:               ratelimit.ChargesFromEnv(env),
	}
	refuseDoubleCharge(env, s)
	payment.RefuseTimeoutPastLock(env, s.Stripe, s.LockTimeout)
	return s
}

// NewService builds, for s, the idempotency-key store and the ride
// service on pool, counting into reg. Failpoints come from FAILPOINTS in
// binaries built with -tags failpoints.
//
// Every process that runs atomic phases builds them here, so here is
// where the database is first checked to keep what a phase commits
// (db.Preflight): a standby that may lose it is refused unless
// AllowAsyncReplication.
func (s Settings) NewService(ctx context.Context, pool *pgxpool.Pool, reg prometheus.Registerer, logger *slog.Logger) (*Service, *idem.Store, error) {
	if err := db.Preflight(ctx, pool, db.PreflightConfig{AllowAsyncReplication: s.AllowAsyncReplication}); err != nil {
		return nil, nil, err
	}
	keys, err := idem.New(&idem.Config{Pool: pool, LockTimeout: s.LockTimeout, Metrics: metrics.NewIdempotency(reg), Actor: s.Actor,
		Logger: logger, Plain: s.Plain})
	if err != nil {
		return nil, nil, err
	}
	stripe := s.Stripe
	stripe.Metrics = metrics.NewStripe(reg)
	payments, err := payment.New(&stripe)
	if err != nil {
		return nil, nil, err
	}
	svc, err := NewService(&ServiceConfig{
		Pool:               pool,
		Keys:               keys,
		Payments:           payments,
		Logger:             logger,
		Failpoint:          failpoint.FromEnv(),
		StripeKeyRetention: s.StripeKeyRetention,
		MaxChargeAttempts:  s.MaxChargeAttempts,
		Charges:            s.Charges,
	})
	return svc, keys, err
}
