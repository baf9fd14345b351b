package reconcile

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Kind is a kind of discrepancy between Stripe and the rides table.
type Kind string

// The discrepancies a reconciliation looks for.
const (
	// ChargeWithoutRide is money taken that no ride accounts for: a
	// successful charge whose metadata names no ride, names a ride that
	// records no charge or another one, or that carries no ride at all
	// although it is one of our customers'.
	ChargeWithoutRide Kind = "charge_without_ride"

	// UnknownCharge is a ride that records a charge Stripe does not have:
	// the ride looks paid and is not.
	UnknownCharge Kind = "unknown_charge"

	// Mismatch is a ride and the charge it records that disagree on
	// amount, currency, customer or whose request they belong to, or a
	// ride that records a charge that did not succeed.
	Mismatch Kind = "mismatch"

	// DoubleCharge is a second successful charge for one ride: the failure
	// idempotency keys exist to prevent.
	DoubleCharge Kind = "double_charge"

	// LostRide is a charge, successful or declined, for a request the
	// database no longer holds: its metadata names a request of which there
	// is no key, no ride and no reaper's record. The database lost commits
	// it had acknowledged. With Config.Rides the ride is restored from the
	// charge, with the answer its client was given, and only one that
	// cannot be is reported.
	LostRide Kind = "lost_ride"
)

// Kinds lists every Kind in the order reports show them.
var Kinds = []Kind{ChargeWithoutRide, UnknownCharge, Mismatch, DoubleCharge, LostRide}

// Restoration is a ride restored from its charge (Config.Rides).
type Restoration struct {
	ChargeID string `json:"charge_id"`
	RideID   int64  `json:"ride_id"`
}

// Discrepancy is one disagreement between Stripe and the rides table.
type Discrepancy struct {
	Kind Kind
	// ChargeID is the charge concerned; for a double charge, the extra
	// one (the one to refund). Empty when there is none.
	ChargeID string
	// RideID is the ride concerned, zero when there is none.
	RideID int64
	// Detail says what is wrong, for a person.
	Detail string
}

// String renders d on one line, as the reconciler prints it.
func (d Discrepancy) String() string {
	var b strings.Builder
	b.WriteString(string(d.Kind))
	if d.ChargeID != "" {
		b.WriteString(" charge=" + d.ChargeID)
	}
	if d.RideID != 0 {
		fmt.Fprintf(&b, " ride=%d", d.RideID)
	}
	b.WriteString(": " + d.Detail)
	return b.String()
}

// Report is the outcome of one reconciliation.
type Report struct {
	// Since and Until bound the window: charges and rides created in it
	// were compared.
	Since, Until time.Time

	// Charges is the number of Rocket Rides' successful charges Stripe
	// listed in the window. Declined (failed) charges, fully refunded ones
	// and other applications' charges on the same account are not counted.
	Charges int

	// Rides is the number of rides compared: those created in the window,
	// and those outside it that a charge in the window names or whose
	// charge is in the window.
	Rides int

	// Pending counts charges younger than the grace period whose ride does
	// not record them yet. Their requests are most likely between the
	// charge and the atomic phase that records it; they are not
	// discrepancies yet, and the next run looks at them again.
	Pending int

	// Discrepancies are ordered by kind (as in Kinds), then ride, then
	// charge.
	Discrepancies []Discrepancy

	// Restored are the rides whose requests the database had lost, which
	// this run restored from their charges.
	Restored []Restoration
	// Tagged counts the charges this run gave their ride's id.
	Tagged int
}

// Count returns the number of discrepancies of kind k.
func (r *Report) Count(k Kind) int {
	n := 0
	for _, d := range r.Discrepancies {
		if d.Kind == k {
			n++
		}
	}
	return n
}

// OK reports whether Stripe and the rides table agree.
func (r *Report) OK() bool { return len(r.Discrepancies) == 0 }

// String is the one-line summary:
// charges=120 rides=120 charge_without_ride=0 unknown_charge=0 mismatch=0 double_charge=0 lost_ride=0 restored=0.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "charges=%d rides=%d", r.Charges, r.Rides)
	for _, k := range Kinds {
		fmt.Fprintf(&b, " %s=%d", k, r.Count(k))
	}
	fmt.Fprintf(&b, " restored=%d", len(r.Restored))
	return b.String()
}

func (r *Report) add(k Kind, chargeID string, rideID int64, format string, args ...any) {
	r.Discrepancies = append(r.Discrepancies, Discrepancy{
		Kind: k, ChargeID: chargeID, RideID: rideID, Detail: fmt.Sprintf(format, args...),
	})
}

// sort puts the discrepancies in a stable order, so that two runs over
// the same state print the same lines.
func (r *Report) sort() {
	slices.SortStableFunc(r.Discrepancies, func(a, b Discrepancy) int {
		return cmp.Or(
			cmp.Compare(slices.Index(Kinds, a.Kind), slices.Index(Kinds, b.Kind)),
			cmp.Compare(a.RideID, b.RideID),
			cmp.Compare(a.ChargeID, b.ChargeID),
		)
	})
}
