// First reading: the ride request's DAG, as the article draws it. run has
// one arm per recovery point; each arm is an atomic phase (r.phase, over
// idem.Store.Phase) or the foreign state mutation, the Stripe charge with
// its own idempotency key (StripeKey). Service.Create (service.go) claims
// the key (idem.Store.Claim), replays a finished one, and runs this DAG.
//
// Left to a second reading: how r.phase and r.phases go to Postgres, two
// phases in one round trip (idem's pipeline.go), and the test seams they
// and the Stripe client pass (seams.go); what the charge step does when
// Stripe cannot say whether it charged, or whose charge it answered with
// (ambiguous.go), and what a person decides then (settle.go); the Stripe
// request of keys made before it was derived from the client's
// (service.go); the rides table's statements (store.go); the
// Service, its config and its entry points (service.go); the HTTP handler
// and the request's parameters (handler.go, params.go).

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
// rocket-rides-<user id>-<SHA-256 of the client's key> (StripeKey), so
// that a request resumed after any crash, or retried after the database
// lost its row, asks Stripe for the same charge again and is charged at
// most once.
package rides

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/rocketrides/rocketrides/internal/audit"
	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/jobs"
	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/platform/problem"
	"github.com/rocketrides/rocketrides/internal/user"
)

// The ride's recovery points between idem.Started and idem.Finished.
const (
	RideCreated   idem.RecoveryPoint = "ride_created"
	ChargeCreated idem.RecoveryPoint = "charge_created"
)

// request is one ride request on its way through the DAG: who asked, the
// idempotency key that holds its place, and what was asked for.
type request struct {
	*Service   // what every request runs with: keys, payments, failpoints, logger
	user       user.User
	key        *idem.Key
	params     Params
	raiseError bool // fail on purpose before the charge (raise_error=true)
	client     bool // a client's own request (Create), not the completer's (limit.go)

	// ride is the ride as the last phase left it, so that the next phase
	// need not read it back. It is nil when the request resumes from a
	// later recovery point, until an arm loads it.
	ride *Ride
}

// run is the DAG: one arm per recovery point, until the key is finished.
// An error leaves the key at its last committed recovery point and
// unlocked, so that a retry, or the completer, resumes from there.
func (r *request) run(ctx context.Context) (idem.Response, error) {
	for {
		var err error
		switch r.key.RecoveryPoint {
		case idem.Started:
			err = r.phase(ctx, r.createRide) // tx: ride + audit -> ride_created
		case RideCreated:
			err = r.charge(ctx) // Stripe call outside any tx, then tx -> charge_created
		case ChargeCreated:
			err = r.phase(ctx, r.stageReceipt) // tx: staged job + stored 201 -> finished
		case idem.Finished:
			return r.key.Response(), nil
		default:
			err = fmt.Errorf("bug: key %d is at unknown recovery point %q", r.key.ID, r.key.RecoveryPoint)
		}
		if err != nil {
			return r.stop(ctx, err)
		}
	}
}

// stop ends the request with err, unlocking its key where it stands.
func (r *request) stop(ctx context.Context, err error) (idem.Response, error) {
	r.unlock(ctx, r.key)
	return idem.Response{}, err
}

// createRide is the atomic phase from started to ride_created: the key's
// move, which draws the ride's id from its sequence, then the ride and its
// audit record, which take it. The key names its ride, so that its record
// still does once the key is reaped (a late retry is told which ride it
// made).
func (r *request) createRide(_ context.Context, tx *idem.Tx) error {
	tx.Move(idem.AdvanceToForeignCall(RideCreated).Creates(rideSequence))
	// Read only once the phase commits (the next arm).
	insertRide(tx, r.key.ID, r.user.ID, r.params, func(ride *Ride) { r.ride = ride })
	return audit.Insert(tx, audit.Record{
		Action:           audit.ActionRideCreated,
		Data:             r.params,
		OriginIP:         r.key.OriginIP,
		ResourceSequence: rideSequence,
		ResourceType:     "ride",
		UserID:           r.user.ID,
	})
}

// charge is the foreign state mutation: it charges for the ride at Stripe
// (ChargeRequest) and then records the charge in an atomic phase that
// moves the key to charge_created. A charge Stripe refuses for good is
// stored as the response instead, and the key is finished.
//
// The Stripe call is made outside any transaction: holding one open
// across a network call would pin a connection and row locks for as long
// as Stripe takes, and would still not make the call atomic with our
// writes. Stripe's idempotency key, StripeKey, is what makes it safe to
// repeat instead.
func (r *request) charge(ctx context.Context) error {
	if err := r.loadRide(ctx); err != nil {
		return err
	}
	if r.raiseError {
		return ErrSimulated
	}
	// Past Stripe's key retention, look for an earlier attempt's charge
	// before charging again (ambiguous.go).
	if adopted, err := r.adoptForgottenCharge(ctx); adopted || err != nil {
		return err
	}

	charge, err := r.payments.Charge(ctx, r.chargeRequest())
	if errors.Is(err, payment.ErrKeyConflict) {
		return r.keyConflict(ctx, err) // never charge again on doubt (ambiguous.go)
	}
	switch payment.OutcomeOf(err) {
	case payment.Declined:
		// Final: the card will be declined on every retry, so the answer
		// is stored and replayed.
		declined := problem.New(http.StatusPaymentRequired, "card_declined", payment.Message(err))
		return r.phase(ctx, r.settle(StatusDeclined, declined))
	case payment.Rejected:
		rejected := problem.New(http.StatusBadGateway, "payment_rejected",
			"The payment provider rejected the charge: "+payment.Message(err))
		return r.phase(ctx, r.settle(StatusFailed, rejected))
	case payment.Unavailable:
		if errors.Is(err, payment.ErrOutcomeUnknown) {
			// Stripe will replay this error to every retry (ambiguous.go).
			return r.unknownOutcome(ctx, err)
		}
		// The charge may exist. Nothing is recorded, and the retry asks
		// Stripe again with the same key, which settles it.
		return fmt.Errorf("charge ride %d: %w", r.ride.ID, err)
	}
	if charge.Replayed { // an earlier attempt's: recorded if provably ours (ambiguous.go)
		if err := r.checkReplay(ctx, charge); err != nil {
			return err
		}
	}
	// No foreign call separates recording the charge from finishing the
	// request: the two phases go out in one pipeline, each still its own
	// transaction (tx -> charge_created, tx -> finished).
	return r.phases(ctx, r.recordCharge(charge.ID), r.stageReceipt)
}

// ChargeRequest is the Stripe request that charges for the ride request
// of key: a pure function of what the client sent (its user, its
// Idempotency-Key, its parameters), holding nothing the database drew. A
// retry after the database lost the key's row and its ride (a failover, a
// restore from backup) makes a new row, sends Stripe the same request,
// and gets back the charge Stripe made the first time. The metadata also
// lets a lost ride be restored (restore.go); the ride's id reaches Stripe
// later, by an update of the charge that cannot charge (package
// reconcile).
func ChargeRequest(u user.User, key *idem.Key, p Params) payment.ChargeRequest {
	params := p.Canonical()
	return payment.ChargeRequest{
		Customer:    u.StripeCustomerID,
		Amount:      Price,
		Currency:    Currency,
		Description: "Rocket Rides ride",
		Metadata: map[string]string{
			MetadataUserID:         strconv.FormatInt(u.ID, 10),
			MetadataIdempotencyKey: key.IdempotencyKey,
			MetadataRequestParams:  string(params),
			MetadataRequestSHA256:  sha256Hex(params),
		},
		IdempotencyKey: StripeKey(key),
	}
}

// StripeKey is the idempotency key of a ride request's charge at Stripe:
// rocket-rides-<user id>-<SHA-256 of the client's Idempotency-Key>, the
// key's identity as the client gave it. Client keys are unique per user,
// so the Stripe key is unique in the account; it is the same on every
// retry, whether or not the database still holds the key's row; and the
// hash keeps it within Stripe's 255 characters whatever the client's key.
// A key made before this scheme keeps the key it was first charged under,
// rocket-rides-<key id>-<key identity>.
func StripeKey(key *idem.Key) string {
	if key.Identity != nil {
		return "rocket-rides-" + strconv.FormatInt(key.ID, 10) + "-" + key.Identity.String()
	}
	return "rocket-rides-" + strconv.FormatInt(key.UserID, 10) + "-" + sha256Hex([]byte(key.IdempotencyKey))
}

// loadRide reads the ride of a request that resumes at ride_created.
func (r *request) loadRide(ctx context.Context) error {
	if r.ride != nil {
		return nil
	}
	ride, err := rideByKey(ctx, r.pool, r.key.ID)
	if err != nil {
		return fmt.Errorf("bug: key %d is at %s without a ride: %w", r.key.ID, RideCreated, err)
	}
	r.ride = ride
	return nil
}

// recordCharge is the atomic phase that ends the charge step: the ride
// gets its charge, and with it status succeeded, and the key moves to
// charge_created.
func (r *request) recordCharge(chargeID string) idem.PhaseFunc {
	return func(_ context.Context, tx *idem.Tx) error {
		tx.Move(idem.Advance(ChargeCreated))
		recordCharge(tx, r.ride.ID, chargeID)
		// Read only once the phase commits (the next arm).
		r.ride.StripeChargeID, r.ride.Status = &chargeID, StatusSucceeded
		return nil
	}
}

// stageReceipt is the atomic phase from charge_created to finished: the
// 201 is stored, and a staged job sends the receipt once this transaction
// commits.
func (r *request) stageReceipt(ctx context.Context, tx *idem.Tx) error {
	ride := r.ride
	if ride == nil || ride.StripeChargeID == nil {
		var err error
		if ride, err = rideByKeyIn(ctx, tx, r.key.ID); err != nil {
			return err
		}
	}
	if ride.StripeChargeID == nil {
		return fmt.Errorf("bug: key %d is at %s but ride %d has no charge", r.key.ID, ChargeCreated, ride.ID)
	}
	return finishPaid(tx, ride)
}

// finishPaid is the end of a paid ride's request: the 201 every retry
// replays, and its receipt, staged to be sent once the phase commits.
func finishPaid(tx *idem.Tx, ride *Ride) error {
	body, err := json.Marshal(ride)
	if err != nil {
		return fmt.Errorf("encode ride %d: %w", ride.ID, err)
	}
	tx.Move(idem.Respond(http.StatusCreated, body))
	return jobs.Stage(tx, jobs.ReceiptArgs{
		RideID:         ride.ID,
		UserID:         ride.UserID,
		Amount:         ride.Amount,
		Currency:       ride.Currency,
		StripeChargeID: *ride.StripeChargeID,
	})
}

// settle is the atomic phase that ends the charge step without a charge:
// the ride moves to status, and p, naming the ride, is stored as the
// request's final response.
func (r *request) settle(status Status, p *problem.Problem) idem.PhaseFunc {
	body := p.With("ride_id", r.ride.ID).JSON()
	return func(_ context.Context, tx *idem.Tx) error {
		tx.Move(idem.Respond(p.Status, body))
		settleRide(tx, r.ride.ID, status)
		return nil
	}
}
