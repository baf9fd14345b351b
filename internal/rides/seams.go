// Second reading: the seams of a ride request, where tests inject a
// failure or a crash (ServiceConfig.Failpoint), and how the request passes
// them without the DAG (request.go) saying so. The DAG reads, and runs,
// the same whether or not a seam is armed: each seam sits in one of the
// helpers the DAG calls anyway, the atomic phase (phase, phases) and the
// Stripe charge (seamedGateway), or outside the DAG (request.drive,
// Handler.create). In production no seam is armed, and each costs a nil
// check.

package rides

import (
	"context"
	"time"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/platform/failpoint"
)

// The seams of a ride request, in the order a request passes them. Their
// names are part of the crash tests' contract (FAILPOINTS=name=kill). An
// after_<recovery point> seam fires once the atomic phase that reached
// that recovery point has committed.
const (
	FailAfterClaim         = "after_claim"          // request.drive, before the DAG's first arm
	FailAfterRideCreated   = "after_ride_created"   // phase, once createRide has committed
	FailBeforeCharge       = "before_charge"        // seamedGateway.Charge, before Stripe is asked to charge
	FailAfterCharge        = "after_charge"         // seamedGateway.Charge: Stripe charged; nothing is recorded yet
	FailInRecordCharge     = "in_record_charge"     // phase, inside the transaction that records the charge
	FailAfterChargeCreated = "after_charge_created" // phase, once the charge is recorded (see phases)
	FailAfterFinished      = "after_finished"       // phase or phases, once the response is stored
	FailBeforeResponse     = "before_response"      // Handler.create, before the response is written
)

// seamAfter names the seam just past each recovery point a phase reaches.
var seamAfter = map[idem.RecoveryPoint]string{
	RideCreated:   FailAfterRideCreated,
	ChargeCreated: FailAfterChargeCreated,
	idem.Finished: FailAfterFinished,
}

// seamIn names the seam inside the transaction of the phase that moves a
// key to a recovery point, once the phase's writes are queued.
var seamIn = map[idem.RecoveryPoint]string{
	ChargeCreated: FailInRecordCharge,
}

// phases runs first and then second as two atomic phases of the request's
// key, sent in one pipeline (idem.Store.PhaseThen): two transactions, two
// commits, one round trip. The seam past the recovery point reached fires
// once both have committed. On the plain path it runs first alone, and the
// DAG's next arm runs second, as the article does.
//
// The seam between the two needs the commits apart. The DAG pipelines one
// pair, recordCharge and stageReceipt, so that seam is after_charge_created.
// Where it is armed (a crash test's), first is sent alone and the seam
// fires once it has committed, leaving the state a crash between the two
// leaves; the DAG's next arm then runs second, as a phase of its own.
func (r *request) phases(ctx context.Context, first, second idem.PhaseFunc) error {
	if r.keys.Plain() || r.fail.Armed(FailAfterChargeCreated) {
		return r.phase(ctx, first)
	}
	if err := r.keys.PhaseThen(ctx, r.key, r.seamedPhase(first), r.seamedPhase(second)); err != nil {
		return err
	}
	return r.fail.At(ctx, seamAfter[r.key.RecoveryPoint])
}

// seamedPhase is fn, then, inside the same transaction, the seam of the
// recovery point fn moves the key to (seamIn), if it has one.
func (r *request) seamedPhase(fn idem.PhaseFunc) idem.PhaseFunc {
	return func(ctx context.Context, tx *idem.Tx) error {
		if err := fn(ctx, tx); err != nil {
			return err
		}
		return r.fail.At(ctx, seamIn[tx.Next()])
	}
}

// gateway is what a ride request asks of the payment provider:
// payment.Gateway, the only Stripe client, or where seams may be armed,
// seamedGateway.
type gateway interface {
	Charge(ctx context.Context, req payment.ChargeRequest) (payment.Created, error)
	FindCharge(ctx context.Context, customer, metadataKey, value string, since time.Time) (chargeID string, found bool, err error)
	ChargesFor(ctx context.Context, customer, metadataKey, value string, since time.Time) ([]*payment.Charge, error)
}

// seamedGateway is the payment gateway with the seams on either side of
// the foreign state mutation: before Stripe is asked to charge, and once
// it has charged, before the charge is recorded.
type seamedGateway struct {
	*payment.Gateway
	fail *failpoint.Set
}

// withSeams is payments, with the seams around its charge where fail may
// arm them.
func withSeams(payments *payment.Gateway, fail *failpoint.Set) gateway {
	if fail == nil {
		return payments
	}
	return seamedGateway{Gateway: payments, fail: fail}
}

func (g seamedGateway) Charge(ctx context.Context, req payment.ChargeRequest) (payment.Created, error) {
	if err := g.fail.At(ctx, FailBeforeCharge); err != nil {
		return payment.Created{}, err
	}
	charge, err := g.Gateway.Charge(ctx, req)
	if err != nil {
		return payment.Created{}, err
	}
	return charge, g.fail.At(ctx, FailAfterCharge)
}
