// Package rides is the ride request, POST /rides: its parameters, its
// atomic phases and its HTTP handlers. It owns the rides table.
//
// A ride request is a small state machine whose states are recovery
// points. Each arrow is an atomic phase, one Postgres transaction that
// makes its writes and moves the recovery point together:
//
//	started ──(ride + audit record)──> ride_created
//	ride_created ──(Stripe charge, then record it)──> charge_created
//	charge_created ──(staged receipt job + stored 201)──> finished
//
// The Stripe charge is the one foreign state mutation. It happens between
// transactions, never inside one, and carries the idempotency key
// rocket-rides-<idempotency key id>, so that a request resumed after any
// crash asks Stripe for the same charge again and is charged at most once.
package rides

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketrides/rocketrides/internal/audit"
	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/jobs"
	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/platform/failpoint"
	"github.com/rocketrides/rocketrides/internal/platform/logctx"
	"github.com/rocketrides/rocketrides/internal/platform/problem"
	"github.com/rocketrides/rocketrides/internal/user"
)

// The ride's recovery points between idem.Started and idem.Finished.
const (
	RideCreated   idem.RecoveryPoint = "ride_created"
	ChargeCreated idem.RecoveryPoint = "charge_created"
)

// Every ride costs the same while Rocket Rides is young.
const (
	Price    = 2000 // cents
	Currency = "usd"
)

// The seams of a ride request where tests inject failures.
const (
	FailAfterClaim         = "after_claim"
	FailAfterRideCreated   = "after_ride_created"
	FailBeforeCharge       = "before_charge"
	FailAfterCharge        = "after_charge" // Stripe answered; the charge is not recorded yet
	FailInRecordCharge     = "in_record_charge"
	FailAfterChargeCreated = "after_charge_created"
	FailAfterFinished      = "after_finished"
	FailBeforeResponse     = "before_response"
)

// ErrSimulated is the failure a client asks for with raise_error=true.
var ErrSimulated = errors.New("simulated failure requested with raise_error")

// Path is where rides are created; it is part of every ride key's
// fingerprint.
const Path = "/rides"

// StripeKey is the idempotency key sent to Stripe for the charge of the
// request with idempotency key id keyID. It is derived from our key row,
// not from the client's key, so that it is unique across all users and the
// same on every retry of the request.
func StripeKey(keyID int64) string { return "rocket-rides-" + strconv.FormatInt(keyID, 10) }

// Defaults of ServiceConfig.
const (
	// DefaultStripeKeyRetention is how long Stripe remembers an
	// idempotency key.
	DefaultStripeKeyRetention = 24 * time.Hour
	// DefaultMaxChargeAttempts bounds how many of a request's charge
	// attempts may end with an unknown outcome (Stripe replaying a stored
	// 500) before a human has to look at it. Outages do not count.
	DefaultMaxChargeAttempts = 10
)

// ServiceConfig configures a Service.
type ServiceConfig struct {
	// Pool is the database of rides and idempotency keys. Required.
	Pool *pgxpool.Pool
	// Keys is the idempotency-key store the requests' keys live in.
	// Required.
	Keys *idem.Store
	// Payments charges the rides. Required.
	Payments *payment.Gateway
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Failpoint is called at every seam (the Fail* constants); nil
	// injects nothing.
	Failpoint failpoint.Func

	// StripeKeyRetention is how long Stripe remembers an idempotency
	// key: past it, a retried charge is first looked up at Stripe, which
	// no longer dedupes it. Zero means DefaultStripeKeyRetention.
	StripeKeyRetention time.Duration
	// MaxChargeAttempts is how many charge attempts of a request may end
	// with an unknown outcome before the key is set aside for a human.
	// Zero means DefaultMaxChargeAttempts.
	MaxChargeAttempts int
}

func (c *ServiceConfig) validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("rides: ServiceConfig.Pool is required")
	case c.Keys == nil:
		return errors.New("rides: ServiceConfig.Keys is required")
	case c.Payments == nil:
		return errors.New("rides: ServiceConfig.Payments is required")
	case c.StripeKeyRetention < 0:
		return fmt.Errorf("rides: ServiceConfig.StripeKeyRetention must not be negative, got %s", c.StripeKeyRetention)
	case c.MaxChargeAttempts < 0:
		return fmt.Errorf("rides: ServiceConfig.MaxChargeAttempts must not be negative, got %d", c.MaxChargeAttempts)
	}
	return nil
}

// Service runs ride requests, for the API and for the completer alike.
type Service struct {
	pool              *pgxpool.Pool
	keys              *idem.Store
	payments          *payment.Gateway
	logger            *slog.Logger
	fail              failpoint.Func
	stripeRetention   time.Duration
	maxChargeAttempts int
}

// NewService returns a Service for config.
func NewService(config *ServiceConfig) (*Service, error) {
	if config == nil {
		config = &ServiceConfig{}
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	return &Service{
		pool:              config.Pool,
		keys:              config.Keys,
		payments:          config.Payments,
		logger:            cmp.Or(config.Logger, slog.Default()),
		fail:              config.Failpoint,
		stripeRetention:   cmp.Or(config.StripeKeyRetention, DefaultStripeKeyRetention),
		maxChargeAttempts: cmp.Or(config.MaxChargeAttempts, DefaultMaxChargeAttempts),
	}, nil
}

// CreateRequest is one POST /rides.
type CreateRequest struct {
	User           user.User
	IdempotencyKey string
	Params         Params
	OriginIP       netip.Addr
	// RaiseError fails the request after the ride is created, before the
	// charge (only when the API runs with simulated errors).
	RaiseError bool
}

// Result is the response to a ride request.
type Result struct {
	idem.Response
	// Replayed is true when the key had finished before this request:
	// the response is the stored one and nothing ran.
	Replayed bool
}

// Create claims the request's idempotency key and drives the request to a
// response, resuming from the key's recovery point if an earlier attempt
// got part way.
func (s *Service) Create(ctx context.Context, req CreateRequest) (Result, error) {
	key, replayed, err := s.keys.Claim(ctx, idem.Request{
		UserID:   req.User.ID,
		Key:      req.IdempotencyKey,
		Method:   http.MethodPost,
		Path:     Path,
		Params:   req.Params.Canonical(),
		OriginIP: req.OriginIP,
	})
	if err != nil {
		return Result{}, err
	}
	if replayed {
		return Result{Response: key.Response(), Replayed: true}, nil
	}
	resp, err := s.run(ctx, req.User, key, req.Params, req.RaiseError)
	return Result{Response: resp}, err
}

// Resume drives a key that the caller has already claimed (the completer)
// to a response, with the request's stored parameters, as its user.
func (s *Service) Resume(ctx context.Context, key *idem.Key) (idem.Response, error) {
	var params Params
	if err := json.Unmarshal(key.RequestParams, &params); err != nil {
		s.unlock(ctx, key)
		return idem.Response{}, fmt.Errorf("decode stored params of key %d: %w", key.ID, err)
	}
	u, err := user.ByID(ctx, s.pool, key.UserID)
	if err != nil {
		s.unlock(ctx, key)
		return idem.Response{}, fmt.Errorf("load user of key %d: %w", key.ID, err)
	}
	logctx.Set(ctx, slog.Int64(logctx.UserID, u.ID))
	return s.run(ctx, u, key, params, false)
}

// run is the DAG: one arm per recovery point, each an atomic phase, until
// the key is finished. Any error leaves the key at its last committed
// recovery point and unlocks it, so that a retry resumes from there.
func (s *Service) run(ctx context.Context, u user.User, key *idem.Key, params Params, raiseError bool) (idem.Response, error) {
	if key.AttentionReason != nil && key.RecoveryPoint != idem.Finished {
		s.unlock(ctx, key)
		return idem.Response{}, fmt.Errorf("key %d: %s: %w", key.ID, *key.AttentionReason, idem.ErrNeedsAttention)
	}
	if err := s.fail.At(ctx, FailAfterClaim); err != nil {
		s.unlock(ctx, key)
		return idem.Response{}, err
	}
	// The ride as the last phase left it, so the next phase need not read
	// it back; nil when resuming, and then each phase loads it.
	var ride *Ride
	for {
		var err error
		switch key.RecoveryPoint {
		case idem.Started:
			err = s.keys.Phase(ctx, key, s.createRide(u, key, params, &ride))
		case RideCreated:
			err = s.chargeRide(ctx, u, key, &ride, raiseError)
		case ChargeCreated:
			err = s.keys.Phase(ctx, key, s.stageReceipt(u, key, ride))
		case idem.Finished:
			return key.Response(), nil
		default:
			err = fmt.Errorf("bug: key %d is at unknown recovery point %q", key.ID, key.RecoveryPoint)
		}
		if err == nil {
			err = s.fail.At(ctx, "after_"+string(key.RecoveryPoint))
		}
		if err != nil {
			s.unlock(ctx, key)
			return idem.Response{}, err
		}
	}
}

// createRide is the phase from started to ride_created: the ride and its
// audit record.
func (s *Service) createRide(u user.User, key *idem.Key, params Params, created **Ride) idem.PhaseFunc {
	return func(ctx context.Context, tx *idem.Tx) (idem.Outcome, error) {
		ride, err := insertRide(ctx, tx, key.ID, u.ID, params)
		if err != nil {
			return idem.Outcome{}, err
		}
		*created = ride
		rideID := ride.ID
		if err := audit.Insert(tx, audit.Record{
			Action:       audit.ActionRideCreated,
			Data:         params,
			OriginIP:     key.OriginIP,
			ResourceID:   rideID,
			ResourceType: "ride",
			UserID:       u.ID,
		}); err != nil {
			return idem.Outcome{}, err
		}
		return idem.AdvanceToForeignCall(RideCreated), nil
	}
}

// chargeRide moves the request from ride_created to charge_created (or to
// finished, for a final payment error). The Stripe call is made outside
// any transaction: holding one open across a network call would pin a
// connection and row locks for as long as Stripe takes, and would still
// not make the call atomic with our writes. Stripe's idempotency key is
// what makes it safe to repeat instead.
func (s *Service) chargeRide(ctx context.Context, u user.User, key *idem.Key, known **Ride, raiseError bool) error {
	ride := *known
	if ride == nil {
		var err error
		if ride, err = rideByKey(ctx, s.pool, key.ID); err != nil {
			return fmt.Errorf("bug: key %d is at %s without a ride: %w", key.ID, RideCreated, err)
		}
		*known = ride
	}
	if err := s.fail.At(ctx, FailBeforeCharge); err != nil {
		return err
	}
	if raiseError {
		return ErrSimulated
	}

	if s.stripeMayHaveForgotten(key) {
		chargeID, found, err := s.payments.FindCharge(ctx, u.StripeCustomerID,
			"idempotency_key_id", strconv.FormatInt(key.ID, 10), key.FirstForeignAttemptAt.Add(-time.Hour))
		if err != nil {
			return fmt.Errorf("look up earlier charge of ride %d: %w", ride.ID, err)
		}
		if found {
			s.logger.InfoContext(ctx, "adopting charge found at Stripe from an earlier attempt",
				"idempotency_key_id", key.ID, "ride_id", ride.ID, "charge_id", chargeID)
			return s.keys.Phase(ctx, key, s.recordCharge(ride, chargeID))
		}
	}

	chargeID, err := s.payments.Charge(ctx, payment.ChargeRequest{
		Customer:    u.StripeCustomerID,
		Amount:      ride.Amount,
		Currency:    ride.Currency,
		Description: fmt.Sprintf("Rocket Rides ride %d", ride.ID),
		Metadata: map[string]string{
			"ride_id":            strconv.FormatInt(ride.ID, 10),
			"idempotency_key_id": strconv.FormatInt(key.ID, 10),
		},
		IdempotencyKey: StripeKey(key.ID),
	})
	switch payment.OutcomeOf(err) {
	case payment.Declined:
		// Final: the card will be declined on every retry, so the answer
		// is stored and replayed.
		body := problem.New(http.StatusPaymentRequired, "card_declined", payment.Message(err)).JSON()
		return s.keys.Phase(ctx, key, respond(http.StatusPaymentRequired, body))
	case payment.Rejected:
		body := problem.New(http.StatusBadGateway, "payment_rejected",
			"The payment provider rejected the charge: "+payment.Message(err)).JSON()
		return s.keys.Phase(ctx, key, respond(http.StatusBadGateway, body))
	case payment.Unavailable:
		if !errors.Is(err, payment.ErrOutcomeUnknown) {
			// The charge may exist. Nothing is recorded, and the retry
			// asks Stripe again with the same key, which settles it.
			return fmt.Errorf("charge ride %d: %w", ride.ID, err)
		}
		// Stripe stored an error for this key and will replay it to every
		// retry: asking again cannot tell whether the charge happened.
		// Give it a bounded number of tries, then a human.
		n, rerr := s.keys.RecordUnknownOutcome(ctx, key)
		if rerr != nil {
			return errors.Join(fmt.Errorf("charge ride %d: %w", ride.ID, err), rerr)
		}
		if n >= s.maxChargeAttempts {
			return s.setAside(ctx, u, key, ride.ID, n)
		}
		return fmt.Errorf("charge ride %d (unknown outcome %d of %d): %w", ride.ID, n, s.maxChargeAttempts, err)
	}
	if err := s.fail.At(ctx, FailAfterCharge); err != nil {
		return err
	}

	return s.keys.Phase(ctx, key, s.recordCharge(ride, chargeID))
}

// setAside flags key for a human after n unknown outcomes of its charge.
func (s *Service) setAside(ctx context.Context, u user.User, key *idem.Key, rideID int64, n int) error {
	reason := fmt.Sprintf("charge outcome still unknown after %d attempts; check Stripe for metadata idempotency_key_id=%d",
		n, key.ID)
	s.logger.ErrorContext(ctx, "setting idempotency key aside for human attention",
		"idempotency_key_id", key.ID, "user_id", u.ID, "ride_id", rideID, "reason", reason)
	if err := s.keys.FlagForAttention(ctx, key, reason); err != nil {
		return err
	}
	return fmt.Errorf("key %d: %w", key.ID, idem.ErrNeedsAttention)
}

// recordCharge is the phase that ends the charge step: the ride gets its
// charge and the key moves to charge_created.
func (s *Service) recordCharge(ride *Ride, chargeID string) idem.PhaseFunc {
	return func(ctx context.Context, tx *idem.Tx) (idem.Outcome, error) {
		recordCharge(tx, ride.ID, chargeID)
		if err := s.fail.At(ctx, FailInRecordCharge); err != nil {
			return idem.Outcome{}, err
		}
		// Only read after the phase commits (the next arm).
		ride.StripeChargeID = &chargeID
		return idem.Advance(ChargeCreated), nil
	}
}

// stripeMayHaveForgotten reports whether the charge was first attempted so
// long ago that Stripe may no longer hold its idempotency key. Repeating
// the charge then could charge twice, so the charge is looked up first.
// The margin covers clock skew and a slow first attempt.
func (s *Service) stripeMayHaveForgotten(key *idem.Key) bool {
	if key.FirstForeignAttemptAt == nil {
		return false
	}
	margin := min(time.Hour, s.stripeRetention/24)
	return time.Since(*key.FirstForeignAttemptAt) >= s.stripeRetention-margin
}

// stageReceipt is the phase from charge_created to finished: a staged job
// sends the receipt once this transaction commits, and the 201 is stored.
func (s *Service) stageReceipt(u user.User, key *idem.Key, ride *Ride) idem.PhaseFunc {
	return func(ctx context.Context, tx *idem.Tx) (idem.Outcome, error) {
		if ride == nil || ride.StripeChargeID == nil {
			var err error
			if ride, err = rideByKeyIn(ctx, tx, key.ID); err != nil {
				return idem.Outcome{}, err
			}
		}
		if ride.StripeChargeID == nil {
			return idem.Outcome{}, fmt.Errorf("bug: key %d is at %s but ride %d has no charge", key.ID, ChargeCreated, ride.ID)
		}
		if err := jobs.Stage(tx, jobs.ReceiptArgs{
			RideID:         ride.ID,
			UserID:         u.ID,
			Amount:         ride.Amount,
			Currency:       ride.Currency,
			StripeChargeID: *ride.StripeChargeID,
		}); err != nil {
			return idem.Outcome{}, err
		}
		body, err := json.Marshal(ride)
		if err != nil {
			return idem.Outcome{}, fmt.Errorf("encode ride %d: %w", ride.ID, err)
		}
		return idem.Respond(http.StatusCreated, body), nil
	}
}

func respond(code int, body []byte) idem.PhaseFunc {
	return func(context.Context, *idem.Tx) (idem.Outcome, error) {
		return idem.Respond(code, body), nil
	}
}

// unlock releases key after a failure. An unlock that fails is logged and
// otherwise harmless: the lock goes stale after the lock timeout.
func (s *Service) unlock(ctx context.Context, key *idem.Key) {
	if err := s.keys.Unlock(ctx, key); err != nil {
		s.logger.ErrorContext(ctx, "unlock idempotency key failed; it frees itself after the lock timeout",
			"idempotency_key_id", key.ID, "recovery_point", key.RecoveryPoint, "error", err)
	}
}
