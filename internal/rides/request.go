// First reading: the ride request's DAG, as the article draws it. run has
// one arm per recovery point; each arm is an atomic phase (request.phase,
// over idem.Store.Phase) or the foreign state mutation, the Stripe charge
// with its own idempotency key (StripeKey). Service.Create (service.go)
// claims the key (idem.Store.Claim), replays a finished one, and runs
// this DAG.
//
// Left to a second reading, by the names the DAG calls: the charge cap
// and the test seams around each phase (request.capped, request.refused:
// limit.go; request.seamedPhase, Set.At, request.phases, which pipelines
// two phases on the fast path: seams.go); a charge Stripe cannot settle
// (request.adoptForgottenCharge, request.keyConflict,
// request.unknownOutcome, request.checkReplay: ambiguous.go); the rides
// table (insertRide, recordCharge, settleRide, rideByKey, rideByKeyIn:
// store.go); audit.Insert; the Stripe client (gateway.Charge,
// payment.OutcomeOf, payment.Message; request.chargeRequest, sha256Hex and
// Service.unlock: service.go); problem.New, Problem.With, Problem.JSON;
// Params.Canonical; idem.AdvanceToForeignCall and Outcome.Creates.

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

	// ride is the ride as the last phase left it; nil when the request
	// resumes past started, until an arm loads it.
	ride *Ride
}

// run is the DAG: one arm per recovery point, until the key is finished.
// An error unlocks the key at its last committed recovery point, for a
// retry, or the completer, to resume from.
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

// phase runs fn as an atomic phase of the key, with the cap and seams.
func (r *request) phase(ctx context.Context, fn idem.PhaseFunc) error {
	if err := r.keys.Phase(ctx, r.key, r.capped(r.seamedPhase(fn))); err != nil {
		return r.refused(ctx, err)
	}
	return r.fail.At(ctx, seamAfter[r.key.RecoveryPoint])
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
// The Stripe call is made outside any transaction: one held open across
// it would pin a connection and row locks for as long as Stripe takes, and
// still not make the call atomic with our writes. Stripe's idempotency
// key, StripeKey, makes it safe to repeat instead.
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
	// Recorded (tx -> charge_created), the charge is followed by the next
	// arm's phase, with no foreign call between: on the fast path both go
	// out in one pipeline, each still its own transaction.
	return r.phases(ctx, r.recordCharge(charge.ID), r.stageReceipt)
}

// ChargeRequest is the Stripe request that charges for the ride request
// of key: a pure function of what the client sent (its user, its
// Idempotency-Key, its parameters), holding nothing the database drew. A
// retry after the database lost the key's row and its ride (a failover, a
// restore from backup) makes a new row, sends Stripe the same request,
// and gets back the charge Stripe made the first time. The metadata also
// lets a lost ride be restored (restore.go).
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

// loadRide reads the ride of a request resuming at ride_created.
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

// recordCharge is the atomic phase that ends the charge step: the key
// moves to charge_created and the ride gets its charge (succeeded).
func (r *request) recordCharge(chargeID string) idem.PhaseFunc {
	return func(_ context.Context, tx *idem.Tx) error {
		tx.Move(idem.Advance(ChargeCreated))
		recordCharge(tx, r.ride.ID, chargeID)
		// Read only once the phase commits (the next arm).
		r.ride.StripeChargeID, r.ride.Status = &chargeID, StatusSucceeded
		return nil
	}
}

// stageReceipt is the atomic phase from charge_created to finished.
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

// finishPaid ends a paid ride's request: the 201, and its receipt, staged.
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
// p, naming the ride, is stored as the response, and the ride gets status.
func (r *request) settle(status Status, p *problem.Problem) idem.PhaseFunc {
	body := p.With("ride_id", r.ride.ID).JSON()
	return func(_ context.Context, tx *idem.Tx) error {
		tx.Move(idem.Respond(p.Status, body))
		settleRide(tx, r.ride.ID, status)
		return nil
	}
}
