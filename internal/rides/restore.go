// Second reading, beyond the article: a ride request the database lost,
// restored from its charge at Stripe. A database can lose commits it had
// acknowledged (a failover to a standby that did not have them, a split
// brain rewound, a restore from backup), and with them a ride that was
// paid for, or declined. Because the charge is the client's request
// (ChargeRequest), its metadata holds everything that request was: who
// asked, under which Idempotency-Key, for what; and Stripe keeps a
// declined charge too. Restore makes the request again from it, as a key
// claimed and an atomic phase from started to finished: the ride, already
// paid (its receipt staged, the 201 stored) or declined (the 402 stored),
// and its audit record, so that the client's retry replays the answer it
// was given. Package reconcile finds the charges to restore.

package rides

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/rocketrides/rocketrides/internal/audit"
	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/platform/problem"
	"github.com/rocketrides/rocketrides/internal/user"
)

// ActionRideRestored is the audit action of a ride restored from its
// charge.
const ActionRideRestored = "ride.restored"

// ErrNotLost means the charge's request is in the database after all (a
// key of the same user and Idempotency-Key exists, finished, in flight or
// reaped): nothing is restored.
var ErrNotLost = errors.New("the charge's request is not lost")

// NotRestorableError means the charge cannot be restored without a
// person: its metadata does not make a ride request this project would
// have charged for as it was charged. Reason says why.
type NotRestorableError struct {
	ChargeID string
	Reason   string
}

func (e *NotRestorableError) Error() string {
	return fmt.Sprintf("charge %s cannot be restored: %s", e.ChargeID, e.Reason)
}

// restoredFrom is what a charge says of the request that made it.
type restoredFrom struct {
	userID int64
	key    string
	params Params
	// rideID is the ride's id as the charge names it (MetadataRideID,
	// added once the charge was recorded), 0 when it names none.
	rideID int64
}

// RequestOfCharge reads the ride request charge c names in its metadata
// (ChargeRequest): its user and the client's Idempotency-Key. ok is false
// for a charge that names none, such as one of a key made before the
// charge was derived from the client's request.
func RequestOfCharge(c *payment.Charge) (userID int64, key string, ok bool) {
	userID, err := strconv.ParseInt(c.Metadata[MetadataUserID], 10, 64)
	key = c.Metadata[MetadataIdempotencyKey]
	if err != nil || key == "" {
		return 0, "", false
	}
	return userID, key, true
}

// requestOf reads the request that made charge c from its metadata, and
// checks that it is one this project would have made for it: the
// parameters are their own fingerprint, and the amount, the currency and
// the customer are the ride's and its user's.
func requestOf(c *payment.Charge, u func(id int64) (user.User, error)) (restoredFrom, error) {
	refuse := func(format string, args ...any) (restoredFrom, error) {
		return restoredFrom{}, &NotRestorableError{ChargeID: c.ID, Reason: fmt.Sprintf(format, args...)}
	}
	var req restoredFrom
	var (
		err   error
		named bool
	)
	if req.userID, req.key, named = RequestOfCharge(c); !named {
		return refuse("metadata %s %q and %s %q name no request", MetadataUserID, c.Metadata[MetadataUserID],
			MetadataIdempotencyKey, c.Metadata[MetadataIdempotencyKey])
	}
	raw := c.Metadata[MetadataRequestParams]
	if sha256Hex([]byte(raw)) != c.Metadata[MetadataRequestSHA256] {
		return refuse("metadata %s does not hash to %s", MetadataRequestParams, MetadataRequestSHA256)
	}
	if err := json.Unmarshal([]byte(raw), &req.params); err != nil || string(req.params.Canonical()) != raw {
		return refuse("metadata %s is not a ride's parameters", MetadataRequestParams)
	}
	if v, ok := c.Metadata[MetadataRideID]; ok {
		if req.rideID, err = strconv.ParseInt(v, 10, 64); err != nil || req.rideID <= 0 {
			return refuse("metadata %s %q is not a ride id", MetadataRideID, v)
		}
	}
	switch {
	case !c.TookMoney() && !c.Declined():
		return refuse("the charge is %s (refunded: %t): neither a payment nor a decline to restore a ride for", c.Status, c.Refunded)
	case c.Amount != Price || c.Currency != Currency:
		return refuse("the charge is %d %s, not a ride's price of %d %s", c.Amount, c.Currency, Price, Currency)
	}
	owner, err := u(req.userID)
	switch {
	case errors.Is(err, user.ErrNotFound):
		return refuse("metadata %s %d names no user", MetadataUserID, req.userID)
	case err != nil:
		return restoredFrom{}, err
	case owner.StripeCustomerID != c.Customer:
		return refuse("user %d is customer %s, the charge's is %s", req.userID, owner.StripeCustomerID, c.Customer)
	}
	return req, nil
}

// Restore makes the ride request that charge c paid for (or that c
// declined) again, when the database holds no request of its user and
// Idempotency-Key: the key is claimed, as any request's, and one atomic
// phase takes it from started to finished with the ride (under the id the
// charge names, where no other ride has it) and an audit record saying
// so; for a payment, the charge recorded on the ride, the receipt staged
// and the 201 stored, for a decline, the 402 stored. It returns the ride's
// id.
//
// It returns ErrNotLost, restoring nothing, when the request is in the
// database after all, and a *NotRestorableError when c does not say what
// to restore. A charge no ride records must then be looked at by a person.
func (s *Service) Restore(ctx context.Context, c *payment.Charge) (rideID int64, err error) {
	req, err := requestOf(c, func(id int64) (user.User, error) { return user.ByID(ctx, s.pool, id) })
	if err != nil {
		return 0, err
	}
	key, replayed, err := s.keys.Claim(ctx, idem.Request{
		UserID:   req.userID,
		Key:      req.key,
		Method:   http.MethodPost,
		Path:     Path,
		Params:   req.params.Canonical(),
		OriginIP: restoredOrigin,
	})
	switch {
	case replayed, errors.Is(err, idem.ErrInFlight), errors.Is(err, idem.ErrKeyExpired), errors.Is(err, idem.ErrKeyReused):
		return 0, fmt.Errorf("charge %s: %w", c.ID, ErrNotLost)
	case err != nil:
		return 0, fmt.Errorf("claim the key of charge %s: %w", c.ID, err)
	case key.Claims > 1 || key.RecoveryPoint != idem.Started:
		// A key that was there, stale: its own request resumes it.
		s.unlock(ctx, key)
		return 0, fmt.Errorf("charge %s: key %d at %s: %w", c.ID, key.ID, key.RecoveryPoint, ErrNotLost)
	}
	var ride *Ride
	err = s.keys.Phase(ctx, key, func(ctx context.Context, tx *idem.Tx) error {
		var err error
		if ride, err = insertRestoredRide(ctx, tx, key.ID, req, c); err != nil {
			return err
		}
		if c.Declined() {
			declined := problem.New(http.StatusPaymentRequired, "card_declined", c.FailureMessage)
			tx.Move(idem.Respond(declined.Status, declined.With("ride_id", ride.ID).JSON()))
		} else if err := finishPaid(tx, ride); err != nil {
			return err
		}
		return audit.Insert(tx, audit.Record{
			Action:       ActionRideRestored,
			Data:         map[string]any{"stripe_charge_id": c.ID, "params": req.params, "restored_from": "stripe"},
			OriginIP:     restoredOrigin,
			ResourceID:   ride.ID,
			ResourceType: "ride",
			UserID:       req.userID,
		})
	})
	if err != nil {
		s.unlock(ctx, key)
		return 0, fmt.Errorf("restore the ride of charge %s: %w", c.ID, err)
	}
	s.logger.InfoContext(ctx, "Restored a ride the database had lost, from its charge",
		slog.String("charge_id", c.ID),
		slog.Int64("ride_id", ride.ID),
		slog.Int64("idempotency_key_id", key.ID),
		slog.Int64("user_id", req.userID),
		slog.Bool("original_ride_id", ride.ID == req.rideID))
	return ride.ID, nil
}

// restoredOrigin stands for the address of a restored request, which the
// database lost with it.
var restoredOrigin = netip.IPv4Unspecified()

// insertRestoredRide inserts the restored ride of key, paid by charge c,
// or declined: under the id the charge names where no ride has it (moving
// the sequence past it, so that no later ride draws it), else under a new
// id; created when the charge was. It flushes tx: the audit record names
// the ride.
func insertRestoredRide(ctx context.Context, tx *idem.Tx, keyID int64, req restoredFrom, c *payment.Charge) (*Ride, error) {
	var want *int64
	if req.rideID != 0 {
		want = &req.rideID
	}
	p := req.params
	status, chargeID := StatusSucceeded, &c.ID
	if c.Declined() {
		status, chargeID = StatusDeclined, nil
	}
	return flushOneRide(ctx, tx, "restored from charge "+c.ID, `
		WITH free AS (
			SELECT $1::bigint AS id
			WHERE $1::bigint IS NOT NULL AND NOT EXISTS (SELECT 1 FROM rides WHERE id = $1::bigint)
		), bumped AS (
			SELECT setval($11::text::regclass, greatest(free.id, last_value)) AS id
			FROM free, rides_id_seq
		)
		INSERT INTO rides (id, created_at, idempotency_key_id, origin_lat, origin_lon, target_lat, target_lon,
		                   amount, currency, stripe_charge_id, user_id, status)
		VALUES (coalesce((SELECT free.id FROM free, bumped), nextval($11::text::regclass)), $2, $3, $4, $5, $6, $7,
		        $8, $9, $10, $12, $13)
		RETURNING id, created_at, status, origin_lat::float8, origin_lon::float8, target_lat::float8,
		          target_lon::float8, amount, currency, stripe_charge_id, user_id, idempotency_key_id`,
		want, c.Created.Truncate(time.Microsecond), keyID, p.OriginLat, p.OriginLon, p.TargetLat, p.TargetLon,
		Price, Currency, chargeID, rideSequence, req.userID, string(status))
}
