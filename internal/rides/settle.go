// Second reading, beyond the article. A key set aside for a person
// (ambiguous.go) waits until someone has looked at Stripe and decided.
// This file is what they decide, each decision a Service method that the
// console and its resolve command call:
//
//   - Adopt: Stripe holds the request's charge. The ride records it and
//     the request finishes as the normal path does: a staged receipt and
//     the stored 201.
//   - Release: let another attempt run. The flag is cleared and the
//     request's budget of unknown outcomes starts afresh; a retry or the
//     completer asks Stripe again with the same idempotency key.
//   - CloseFailed: Stripe shows no charge. The ride fails and the request
//     finishes with a stored failure response.
//
// Each takes the key's lock as a claim does (refused while someone else
// holds it), asks Stripe again before it writes, writes through the
// request's own atomic phases (fenced like any other), and leaves an
// audit record naming the person.

package rides

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rocketrides/rocketrides/internal/audit"
	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/platform/problem"
	"github.com/rocketrides/rocketrides/internal/user"
)

// Settlement is a person's decision about one key set aside.
type Settlement struct {
	// KeyID is the idempotency key's id.
	KeyID int64
	// Operator names the person, for the audit record (ValidOperator).
	Operator string
	// OriginIP is where the person acted from, for the audit record.
	// Required.
	OriginIP netip.Addr
}

// MaxOperatorLength is the longest operator name, in characters.
const MaxOperatorLength = 100

// ErrInvalidSettlement: the settlement names no valid operator or origin;
// the message says which. Nothing is claimed or written.
var ErrInvalidSettlement = errors.New("invalid settlement")

// ValidOperator checks an operator's name as the audit record keeps it:
// 1 to MaxOperatorLength characters of valid UTF-8, not blank, with no
// control or formatting characters (a NUL, a newline, a bidirectional
// override). The console's login and the resolve command check it too,
// so that a person learns at once, not at the first settlement.
func ValidOperator(name string) error {
	n := utf8.RuneCountInString(name)
	switch {
	case !utf8.ValidString(name):
		return &OperatorError{"the operator's name is not valid UTF-8"}
	case strings.TrimSpace(name) == "":
		return &OperatorError{"the operator's name is required"}
	case n > MaxOperatorLength:
		return &OperatorError{fmt.Sprintf("the operator's name has %d characters, at most %d", n, MaxOperatorLength)}
	case strings.IndexFunc(name, func(r rune) bool { return unicode.Is(unicode.C, r) }) >= 0:
		return &OperatorError{"the operator's name holds a control or formatting character"}
	}
	return nil
}

// OperatorError is ValidOperator's refusal of a name: Reason says why,
// for a person to read where the name was typed. It is
// ErrInvalidSettlement.
type OperatorError struct{ Reason string }

func (e *OperatorError) Error() string { return ErrInvalidSettlement.Error() + ": " + e.Reason }

func (e *OperatorError) Unwrap() error { return ErrInvalidSettlement }

func (st Settlement) validate() error {
	if err := ValidOperator(st.Operator); err != nil {
		return err
	}
	if !st.OriginIP.IsValid() {
		return fmt.Errorf("%w: the origin IP is required", ErrInvalidSettlement)
	}
	return nil
}

// Errors of a settlement. Each leaves the key as it was.
var (
	// ErrNotSetAside: the key is not waiting for a person.
	ErrNotSetAside = errors.New("the request is not set aside for a person")
	// ErrChargeFound: Stripe holds a charge for the request, so it may
	// neither be closed as failed nor run again; adopt the charge.
	ErrChargeFound = errors.New("stripe holds a charge for the request")
	// ErrNoCharge: Stripe holds no charge for the request to adopt.
	ErrNoCharge = errors.New("stripe shows no charge for the request")
	// ErrSeveralCharges: Stripe holds more than one charge for the
	// request, a double charge for reconciliation and a refund, not for
	// adoption.
	ErrSeveralCharges = errors.New("stripe holds several charges for the request")
)

// The audit actions of settlements.
const (
	ActionChargeAdopted = "ride.charge_adopted"
	ActionReleased      = "ride.released"
	ActionClosedFailed  = "ride.closed_failed"
)

// Adopt settles a key set aside by adopting the charge Stripe holds for
// it (found by its metadata: chargeMatch): the ride succeeds with
// that charge, its receipt is staged and the request's 201 stored. It
// returns the charge's id.
func (s *Service) Adopt(ctx context.Context, st Settlement) (string, error) {
	var chargeID string
	err := s.settlement(ctx, st, func(ctx context.Context, r *request, reason string, charges []*payment.Charge) error {
		switch len(charges) {
		case 0:
			return fmt.Errorf("key %d: %w", r.key.ID, ErrNoCharge)
		case 1:
		default:
			return fmt.Errorf("key %d: %d charges: %w", r.key.ID, len(charges), ErrSeveralCharges)
		}
		chargeID = charges[0].ID
		record := r.recordCharge(chargeID)
		if err := r.phase(ctx, func(ctx context.Context, tx *idem.Tx) error {
			if err := record(ctx, tx); err != nil {
				return err
			}
			return r.auditSettlement(tx, st, ActionChargeAdopted, reason, chargeID)
		}); err != nil {
			return err
		}
		// The request's last phase, as the normal path runs it.
		return r.phase(ctx, r.stageReceipt)
	})
	return chargeID, err
}

// Release settles a key set aside by letting another attempt run: its
// ride goes back to pending, the flag is cleared, the count of unknown
// outcomes starts again, and the key is released for a client's retry or
// the completer. Refused while Stripe holds a charge for the request
// (adopt it instead).
func (s *Service) Release(ctx context.Context, st Settlement) error {
	return s.settlement(ctx, st, func(ctx context.Context, r *request, reason string, charges []*payment.Charge) error {
		if len(charges) > 0 {
			return fmt.Errorf("key %d: %s: %w", r.key.ID, charges[0].ID, ErrChargeFound)
		}
		return r.keys.Reopen(ctx, r.key, func(_ context.Context, tx *idem.Tx) error {
			settleRide(tx, r.ride.ID, StatusPending)
			return r.auditSettlement(tx, st, ActionReleased, reason, "")
		})
	})
}

// CloseFailed settles a key set aside as failed, once Stripe confirms it
// holds no charge for the request: the ride fails, and the request
// finishes with a stored 502 that every retry replays.
func (s *Service) CloseFailed(ctx context.Context, st Settlement) error {
	return s.settlement(ctx, st, func(ctx context.Context, r *request, reason string, charges []*payment.Charge) error {
		if len(charges) > 0 {
			return fmt.Errorf("key %d: %s: %w", r.key.ID, charges[0].ID, ErrChargeFound)
		}
		failed := problem.New(http.StatusBadGateway, "payment_rejected",
			"The charge did not go through: after a review, no charge was found at the payment provider.")
		closing := r.settle(StatusFailed, failed)
		return r.phase(ctx, func(ctx context.Context, tx *idem.Tx) error {
			if err := closing(ctx, tx); err != nil {
				return err
			}
			return r.auditSettlement(tx, st, ActionClosedFailed, reason, "")
		})
	})
}

// settlement claims the key of st for a person, checks it is set aside at
// ride_created, asks Stripe what it holds for the request, and runs
// decide with the key locked; on any error the key is released as it
// stood.
func (s *Service) settlement(ctx context.Context, st Settlement,
	decide func(ctx context.Context, r *request, reason string, kept []*payment.Charge) error,
) error {
	if err := st.validate(); err != nil {
		return err
	}
	// Checked under the claim's row lock, before the claim writes: a
	// refusal leaves the key as it was, its holder (if any) not fenced off.
	key, err := s.keys.ClaimByID(ctx, st.KeyID, func(key *idem.Key) error {
		if key.AttentionReason == nil || key.RequestPath != Path || key.RecoveryPoint != RideCreated {
			return fmt.Errorf("key %d at %s: %w", key.ID, key.RecoveryPoint, ErrNotSetAside)
		}
		return nil
	})
	if err != nil {
		return err
	}
	r := &request{Service: s, key: key}
	reason := *key.AttentionReason
	if r.user, err = user.ByID(ctx, s.pool, key.UserID); err != nil {
		_, err := r.stop(ctx, fmt.Errorf("load user of key %d: %w", key.ID, err))
		return err
	}
	if err := r.loadRide(ctx); err != nil {
		_, err := r.stop(ctx, err)
		return err
	}
	charges, err := s.StripeCharges(ctx, r.user.StripeCustomerID, key)
	if err != nil {
		_, err := r.stop(ctx, err)
		return err
	}
	var kept []*payment.Charge
	for _, c := range charges {
		if c.TookMoney() {
			kept = append(kept, c)
		}
	}
	if err := decide(ctx, r, reason, kept); err != nil {
		if r.key.LockToken != nil {
			r.unlock(ctx, r.key)
		}
		return err
	}
	s.logger.InfoContext(ctx, "Settled idempotency key set aside for a person",
		slog.Int64("idempotency_key_id", key.ID),
		slog.Int64("ride_id", r.ride.ID),
		slog.String("operator", st.Operator))
	return nil
}

// StripeCharges returns what Stripe holds for key's request: the charges
// of customer whose metadata names the request (chargeMatch), in any
// status.
func (s *Service) StripeCharges(ctx context.Context, customer string, key *idem.Key) ([]*payment.Charge, error) {
	field, value := chargeMatch(key)
	charges, err := s.payments.ChargesFor(ctx, customer, field, value, key.CreatedAt.Add(-time.Hour))
	if err != nil {
		return nil, fmt.Errorf("look up charges of key %d at Stripe: %w", key.ID, err)
	}
	return charges, nil
}

// auditSettlement queues the audit record of a person's settlement.
func (r *request) auditSettlement(tx *idem.Tx, st Settlement, action, reason, chargeID string) error {
	data := map[string]any{
		"operator":           st.Operator,
		"idempotency_key_id": r.key.ID,
		"attention_reason":   reason,
	}
	if chargeID != "" {
		data["stripe_charge_id"] = chargeID
	}
	return audit.Insert(tx, audit.Record{
		Action:       action,
		Data:         data,
		OriginIP:     st.OriginIP,
		ResourceID:   r.ride.ID,
		ResourceType: "ride",
		UserID:       r.user.ID,
	})
}
