package console

import (
	"fmt"
	"net/http"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/rides"
)

// Why says, for one step of a request's story, which part of the design
// it is, and where docs/failures.md tells the failure it answers.
type Why struct {
	Text    string
	Section string
}

// Link is the console's link to the section.
func (w Why) Link() string { return failuresLink(w.Section) }

// why is the sentence for step s of key's story: what the step is, in
// the design's words, as today's code does it.
func why(s idem.Step, key *idem.Key) Why {
	switch s.Event {
	case idem.StepClaimed:
		return Why{"The key is claimed by an INSERT … ON CONFLICT on (user, key): if two clients race one key, exactly one insert wins; the other finds the key locked and is told 409 (or, once the winner has finished, gets its stored answer).", sectionMurphy}
	case idem.StepResumed:
		return Why{"A retry, the completer or a person takes the released key and resumes from its last recovery point instead of starting over: what a committed phase did is not done again, and a repeated charge carries the same Stripe idempotency key.", sectionMurphy}
	case idem.StepTookOver:
		return Why{"The lock had gone stale, so it was taken over with a fresh lock token: the request that held it is fenced off and can no longer move the key.", sectionMurphy}
	case idem.StepReached:
		switch s.RecoveryPoint {
		case rides.RideCreated:
			return Why{"Atomic phase: the ride and its audit record committed together with the recovery point.", sectionMurphy}
		case rides.ChargeCreated:
			return Why{fmt.Sprintf("The charge is recorded on the ride in an atomic phase. Stripe was asked outside any transaction, with the Stripe idempotency key "+
				"rocket-rides-<user id>-<SHA-256 of the client's key> (here %s), made from the client's request alone: asked again after any failure, even from a new row after the database lost the first, Stripe answers with the charge it made, not a second one.", rides.StripeKey(key)), sectionAssumptions}
		case idem.Finished:
			return finished(key)
		}
		return Why{"An atomic phase committed.", sectionMurphy}
	case idem.StepUnknownOutcome:
		return Why{"Stripe answered 500: it may have charged, and Stripe stores a 500 against the idempotency key and replays it to every retry, so asking again may never tell. The attempt is counted on the key; after MAX_CHARGE_ATTEMPTS such answers the key is set aside instead of retried forever.", sectionAssumptions}
	case idem.StepSetAside:
		return Why{"Set aside for a person, with the ride marked needs_review: no retry or completer touches it until someone settles it (Needs attention).", sectionResidual}
	case idem.StepUnlocked:
		return Why{"The attempt failed and released the key at its last committed recovery point, so a retry need not wait for the lock to go stale.", sectionMurphy}
	case idem.StepReopened:
		return Why{"A person released the key for another attempt, with a fresh budget for unknown outcomes.", sectionResidual}
	}
	return Why{}
}

// finished is the sentence for the phase that stored key's response,
// which says what that phase wrote: a receipt is staged only for a ride
// that was charged (rides' stageReceipt); a declined or failed ride is
// settled without one (rides' settle).
func finished(key *idem.Key) Why {
	code := 0
	if key.ResponseCode != nil {
		code = *key.ResponseCode
	}
	switch code {
	case http.StatusCreated:
		return Why{"The 201 is stored with the key, and the ride's receipt staged as a job in the same transaction (the enqueuer moves it into River once that has committed): every retry replays the 201 instead of staging another receipt.", sectionMurphy}
	case http.StatusPaymentRequired:
		return Why{"Stripe declined the card: the ride is declined and the 402 stored with the key in one atomic phase. Nothing was charged, so no receipt is staged; a decline is final, and every retry replays it instead of charging again.", sectionAssumptions}
	case http.StatusBadGateway:
		return Why{"No charge went through (Stripe rejected it, or a person closed the request after Stripe showed none): the ride failed and the 502 is stored with the key in one atomic phase. No receipt is staged; every retry replays the answer.", sectionAssumptions}
	}
	return Why{"The response is stored with the key: every retry replays it. No receipt is staged for a ride that was not charged.", sectionMurphy}
}
