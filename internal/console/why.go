package console

import (
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

func why(s idem.Step) Why {
	switch s.Event {
	case idem.StepClaimed:
		return Why{"The key is claimed by an INSERT … ON CONFLICT on (user, key): if two clients race one key, exactly one insert wins and the other is told 409.", sectionMurphy}
	case idem.StepResumed:
		return Why{"A retry (or the completer) takes the released key and resumes from its last recovery point instead of starting over: nothing done before is done again.", sectionMurphy}
	case idem.StepTookOver:
		return Why{"The lock had gone stale, so it was taken over with a fresh lock token: the request that held it is fenced off and can no longer move the key.", sectionMurphy}
	case idem.StepReached:
		switch s.RecoveryPoint {
		case rides.RideCreated:
			return Why{"Atomic phase: the ride and its audit record committed together with the recovery point.", sectionMurphy}
		case rides.ChargeCreated:
			return Why{"The Stripe charge, made outside any transaction with the idempotency key rocket-rides-<key id>, is recorded: a repeated call could never have charged twice.", sectionAssumptions}
		case idem.Finished:
			return Why{"The response is stored with the key (and the receipt staged in the same transaction): every retry replays it.", sectionMurphy}
		}
		return Why{"An atomic phase committed.", sectionMurphy}
	case idem.StepUnknownOutcome:
		return Why{"Stripe could not say whether it charged. The attempt is counted; past the budget the key is set aside instead of retried forever.", sectionMurphy}
	case idem.StepSetAside:
		return Why{"Set aside for a person, with the ride marked needs_review: no retry or completer touches it until someone settles it (Needs attention).", sectionResidual}
	case idem.StepUnlocked:
		return Why{"The attempt failed and released the key at its last committed recovery point, so a retry need not wait for the lock to go stale.", sectionMurphy}
	case idem.StepReopened:
		return Why{"A person released the key for another attempt, with a fresh budget for unknown outcomes.", sectionResidual}
	}
	return Why{}
}
