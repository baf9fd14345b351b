package rides

// The seams of a ride request where tests inject a failure or a crash
// (ServiceConfig.Failpoint), in the order a request passes them. Each
// fires at one place, named here; an after_<recovery point> seam fires
// once the atomic phase that reached that recovery point has committed.
const (
	FailAfterClaim         = "after_claim"          // run, before the first arm
	FailAfterRideCreated   = "after_ride_created"   // run, after createRide
	FailBeforeCharge       = "before_charge"        // charge, before Stripe is asked
	FailAfterCharge        = "after_charge"         // charge: Stripe answered; the charge is not recorded yet
	FailInRecordCharge     = "in_record_charge"     // recordCharge, inside its transaction
	FailAfterChargeCreated = "after_charge_created" // charge or adoptForgottenCharge, after recordCharge (see phases)
	FailAfterFinished      = "after_finished"       // run or charge, after the phase that stores the response
	FailBeforeResponse     = "before_response"      // Handler.create, before the response is written
)
