// Second reading: the Service that runs ride requests for the api and the
// completer, its config and defaults, and its entry points: Create claims
// a request's key (idem.Store.Claim) and drives it, Resume drives a key the
// completer claimed, both through drive, which refuses a key set aside for
// a person and then runs the DAG (request.go). Also the charge's metadata,
// which names the request on its Stripe charge, and the charge of keys made
// before it was derived from the client's request.

package rides

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/platform/failpoint"
	"github.com/rocketrides/rocketrides/internal/platform/logctx"
	"github.com/rocketrides/rocketrides/internal/platform/trace"
	"github.com/rocketrides/rocketrides/internal/ratelimit"
	"github.com/rocketrides/rocketrides/internal/user"
)

// RecoveryPoints are the ride request's recovery points, in the order it
// passes them.
var RecoveryPoints = []idem.RecoveryPoint{idem.Started, RideCreated, ChargeCreated, idem.Finished}

// Every ride costs the same while Rocket Rides is young.
const (
	Price    = 2000 // cents
	Currency = "usd"
)

// ErrSimulated is the failure a client asks for with raise_error=true.
var ErrSimulated = errors.New("simulated failure requested with raise_error")

// Path is where rides are created; it is part of every ride key's
// fingerprint.
const Path = "/rides"

// Metadata keys a ride's charge carries, all from the client's request
// (ChargeRequest): who asked, under which Idempotency-Key, for what (the
// parameters as canonical JSON, and their SHA-256, the request's
// fingerprint). MetadataRideID is added once the charge is recorded, by
// an update that cannot charge (package reconcile).
const (
	MetadataUserID         = "user_id"
	MetadataIdempotencyKey = "idempotency_key"
	MetadataRequestParams  = "request_params"
	MetadataRequestSHA256  = "request_sha256"
	MetadataRideID         = "ride_id"
)

// Metadata keys of the charges of keys made before the charge was derived
// from the client's request (legacyChargeRequest).
const (
	metadataKeyID       = "idempotency_key_id"
	metadataKeyIdentity = "idempotency_key_identity"
)

// sha256Hex is the SHA-256 of b, in lower-case hex.
func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// chargeRequest is the request's charge at Stripe, ChargeRequest; a key
// made before the charge was derived from the client's request sends what
// it was first charged with.
func (r *request) chargeRequest() payment.ChargeRequest {
	if r.key.Identity != nil {
		return legacyChargeRequest(r.user, r.key, r.ride.ID)
	}
	return ChargeRequest(r.user, r.key, r.params)
}

// legacyChargeRequest is the charge of a key made before the charge was
// derived from the client's request, as it was first sent: keyed by the
// key's row (rocket-rides-<key id>-<key identity>) and naming the ride.
// Sent with other parameters, Stripe would refuse the retry.
func legacyChargeRequest(u user.User, key *idem.Key, rideID int64) payment.ChargeRequest {
	return payment.ChargeRequest{
		Customer:       u.StripeCustomerID,
		Amount:         Price,
		Currency:       Currency,
		Description:    fmt.Sprintf("Rocket Rides ride %d", rideID),
		Metadata:       LegacyMetadata(rideID, key),
		IdempotencyKey: StripeKey(key),
	}
}

// LegacyMetadata is the metadata of the charge of ride rideID, made for a
// key made before the charge was derived from the client's request.
func LegacyMetadata(rideID int64, key *idem.Key) map[string]string {
	return map[string]string{
		MetadataRideID:      strconv.FormatInt(rideID, 10),
		metadataKeyID:       strconv.FormatInt(key.ID, 10),
		metadataKeyIdentity: key.Identity.String(),
	}
}

// chargeMatch is the metadata field and value that name key's request on
// its charges, to find them at Stripe among its customer's: the client's
// Idempotency-Key, unique per user; for a legacy key, its identity.
func chargeMatch(key *idem.Key) (field, value string) {
	if key.Identity != nil {
		return metadataKeyIdentity, key.Identity.String()
	}
	return MetadataIdempotencyKey, key.IdempotencyKey
}

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

// claimTimeout bounds a claim, which runs detached from the client (see
// Create). It is the time a claim may take, not a lock: a claim cut off
// by it after committing leaves a lock that goes stale after the lock
// timeout, as a crashed server's does.
const claimTimeout = 10 * time.Second

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
	// Failpoint is the failpoints armed at the request's seams (the
	// Fail* constants); nil arms none.
	Failpoint *failpoint.Set

	// StripeKeyRetention is how long Stripe remembers an idempotency
	// key: past it, a retried charge is first looked up at Stripe, which
	// no longer dedupes it. Zero means DefaultStripeKeyRetention.
	StripeKeyRetention time.Duration
	// MaxChargeAttempts is how many charge attempts of a request may end
	// with an unknown outcome before the key is set aside for a human.
	// Zero means DefaultMaxChargeAttempts.
	MaxChargeAttempts int
	// Charges caps each user's charges, against card testing (limit.go).
	// A zero Quota caps nothing.
	Charges ratelimit.Policy
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
	case c.Charges.Quota < 0:
		return fmt.Errorf("rides: ServiceConfig.Charges.Quota must not be negative, got %d", c.Charges.Quota)
	case c.Charges.On() && (c.Charges.Window < ratelimit.MinWindow || c.Charges.Window%time.Second != 0):
		return fmt.Errorf("rides: ServiceConfig.Charges.Window must be whole seconds, at least one, got %s", c.Charges.Window)
	}
	return nil
}

// Service runs ride requests, for the API and for the completer alike.
type Service struct {
	pool              *pgxpool.Pool
	keys              *idem.Store
	payments          gateway
	logger            *slog.Logger
	fail              *failpoint.Set
	stripeRetention   time.Duration
	maxChargeAttempts int
	charges           ratelimit.Policy
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
		payments:          withSeams(config.Payments, config.Failpoint),
		logger:            cmp.Or(config.Logger, slog.Default()),
		fail:              config.Failpoint,
		stripeRetention:   cmp.Or(config.StripeKeyRetention, DefaultStripeKeyRetention),
		maxChargeAttempts: cmp.Or(config.MaxChargeAttempts, DefaultMaxChargeAttempts),
		charges:           config.Charges,
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
	// RememberedFor, when set, is the hash of the token User was
	// remembered for instead of looked up (user.NewRememberedContext):
	// the claim checks that User still holds it, in its round trip, and
	// Create fails with an error user.IsTokenChanged recognises if not,
	// having claimed nothing.
	RememberedFor []byte
}

// Result is the response to a ride request.
type Result struct {
	idem.Response
	// Replayed is true when the key had finished before this request:
	// the response is the stored one and nothing ran.
	Replayed bool
	// RideID, when Create fails, is the ride the request had created
	// (status pending, or needs_review), so that the client can follow
	// it; 0 when it got no ride, or none that could be confirmed.
	RideID int64
}

// Create claims the request's idempotency key and drives the request to a
// response, resuming from the key's recovery point if an earlier attempt
// got part way.
func (s *Service) Create(ctx context.Context, req CreateRequest) (Result, error) {
	// The claim runs on a context the client cannot cancel. A claim that
	// commits in Postgres while its caller gives up (the client hung up
	// a moment after sending) would otherwise leave the key locked with
	// nobody to release it, and every retry would be refused 409 until
	// the lock went stale. Finished, the claim hands back the key, and a
	// request cut short after it releases the key as any failure does.
	claimCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	var guard *idem.Guard
	if req.RememberedFor != nil {
		sql, args := user.HoldsToken(req.User, req.RememberedFor)
		guard = &idem.Guard{SQL: sql, Args: args}
	}
	claimCtx, span := startClaim(claimCtx, req.User.ID) // trace.go
	key, replayed, err := s.keys.Claim(claimCtx, idem.Request{
		UserID:   req.User.ID,
		Key:      req.IdempotencyKey,
		Method:   http.MethodPost,
		Path:     Path,
		Params:   req.Params.Canonical(),
		OriginIP: req.OriginIP,
		Guard:    guard,
	})
	s.endClaim(claimCtx, span, key, replayed, err)
	if err != nil {
		return Result{}, err
	}
	if replayed {
		return Result{Response: key.Response(), Replayed: true}, nil
	}
	r := &request{Service: s, user: req.User, key: key, params: req.Params, raiseError: req.RaiseError, client: true}
	resp, err := r.drive(ctx)
	if err != nil {
		return Result{RideID: r.createdRideID(ctx)}, err
	}
	return Result{Response: resp}, nil
}

// Resume drives a key that the caller has already claimed (the completer)
// to a response, with the request's stored parameters, as its user.
func (s *Service) Resume(ctx context.Context, key *idem.Key) (resp idem.Response, err error) {
	ctx, span := s.startResume(ctx, key) // trace.go
	defer func() { trace.End(span, err) }()
	var params Params
	if err = json.Unmarshal(key.RequestParams, &params); err != nil {
		s.unlock(ctx, key)
		return idem.Response{}, fmt.Errorf("decode stored params of key %d: %w", key.ID, err)
	}
	u, err := user.ByID(ctx, s.pool, key.UserID)
	if err != nil {
		s.unlock(ctx, key)
		return idem.Response{}, fmt.Errorf("load user of key %d: %w", key.ID, err)
	}
	logctx.Set(ctx, slog.Int64(logctx.UserID, u.ID))
	r := &request{Service: s, user: u, key: key, params: params}
	return r.drive(ctx)
}

// drive runs the DAG (request.run) for a key the request has just
// claimed, unless the key is set aside for a person: nothing runs then
// until one has settled it (ambiguous.go). Tests pass the seam after the
// claim here (seams.go).
func (r *request) drive(ctx context.Context) (idem.Response, error) {
	if r.key.AttentionReason != nil && r.key.RecoveryPoint != idem.Finished {
		return r.stop(ctx, fmt.Errorf("key %d: %s: %w", r.key.ID, *r.key.AttentionReason, idem.ErrNeedsAttention))
	}
	if err := r.fail.At(ctx, FailAfterClaim); err != nil {
		return r.stop(ctx, err)
	}
	return r.run(ctx)
}

// unlock releases key after a failure. An unlock that fails is logged and
// otherwise harmless: the lock goes stale after the lock timeout.
func (s *Service) unlock(ctx context.Context, key *idem.Key) {
	if err := s.keys.Unlock(ctx, key); err != nil {
		s.logger.ErrorContext(ctx, "Unlock idempotency key failed; it frees itself after the lock timeout",
			slog.Int64("idempotency_key_id", key.ID),
			slog.String("recovery_point", string(key.RecoveryPoint)),
			slog.Any("error", err))
	}
}

// createdRideID returns the id of the ride a request that stopped on an
// error had created, or 0 if it created none. Where the request's own
// state cannot tell (it resumed past started without reading its ride, or
// its first phase may have committed unseen), it looks, briefly and
// detached from a client that may be gone; a ride it cannot confirm
// counts as none.
func (r *request) createdRideID(ctx context.Context) int64 {
	started := r.key.RecoveryPoint == idem.Started
	switch {
	case started && r.ride == nil:
		return 0 // the first phase never ran
	case !started && r.ride != nil:
		return r.ride.ID
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	ride, err := rideByKey(ctx, r.pool, r.key.ID)
	if err != nil {
		return 0
	}
	return ride.ID
}
