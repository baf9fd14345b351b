package invariant

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/rides"
)

// Kind names a broken promise.
type Kind string

// The violations Check finds.
const (
	// DoubleCharge: one request has more than one successful charge.
	DoubleCharge Kind = "double_charge"
	// ChargeWithoutRide: a successful charge names no ride of ours, or a
	// ride of another request.
	ChargeWithoutRide Kind = "charge_without_ride"
	// ChargeNotRecorded: a successful charge's ride does not record it.
	ChargeNotRecorded Kind = "charge_not_recorded"
	// AmountMismatch: a charge or ride is not for the ride's price.
	AmountMismatch Kind = "amount_mismatch"
	// MissingCharge: a request answered 201, or a ride records a charge,
	// without a successful charge at Stripe to show for it.
	MissingCharge Kind = "missing_charge"
	// ResponseMismatch: the stored 201 shows another ride or charge than
	// the ones the request made.
	ResponseMismatch Kind = "response_mismatch"
	// ChargeOnFailedKey: a request answered with an error (a decline, a
	// rejection) yet its customer was charged.
	ChargeOnFailedKey Kind = "charge_on_failed_key"
	// KeyUnfinished: a key is not finished although the system is
	// drained.
	KeyUnfinished Kind = "key_unfinished"
	// KeyWedged: a key is locked although nothing runs: a finished key
	// still locked, or an unfinished one with a live lock.
	KeyWedged Kind = "key_wedged"
	// KeyNeedsAttention: a key was set aside for a human.
	KeyNeedsAttention Kind = "key_needs_attention"
	// StatusMismatch: a ride's status says otherwise than its request's
	// key: a stored 402 whose ride is not declined, a stored 502 whose
	// ride is not failed, or a key set aside whose ride does not wait for
	// review. (The schema keeps succeeded and a recorded charge
	// together.)
	StatusMismatch Kind = "status_mismatch"
	// ReceiptJobMissing: a paid ride has no receipt job, staged or in
	// River, and no receipt.
	ReceiptJobMissing Kind = "receipt_job_missing"
	// ReceiptJobDuplicated: a ride has more than one receipt job.
	ReceiptJobDuplicated Kind = "receipt_job_duplicated"
	// ReceiptJobUnpaid: a receipt job for a ride that is not paid (or does
	// not exist).
	ReceiptJobUnpaid Kind = "receipt_job_unpaid"
	// ReceiptMissing: a paid ride has no receipt although the worker has
	// drained its queue (Options.ReceiptsDrained).
	ReceiptMissing Kind = "receipt_missing"
	// ReceiptDuplicated: more than one receipt recorded for a ride.
	ReceiptDuplicated Kind = "receipt_duplicated"
	// ReceiptUnpaid: a receipt sent for a ride that is not paid.
	ReceiptUnpaid Kind = "receipt_unpaid"
)

// Violation is one broken promise. A violation about one charge or one
// ride names it in ChargeID or RideID as well as in Detail, so that a
// caller who weighs it (the chaos drill's losses) need not read the text.
type Violation struct {
	Kind     Kind
	Detail   string
	ChargeID string // a charge_without_ride's charge
	RideID   int64  // a receipt_missing's ride
}

func (v Violation) String() string { return string(v.Kind) + ": " + v.Detail }

// Report is what Check found: counts of what exists, and the violations.
type Report struct {
	Keys              int // idempotency keys
	KeysFinished      int
	KeysCreated       int // finished with 201
	KeysDeclined      int // finished with 402
	KeysUnfinished    int
	KeysNeedAttention int

	Rides     int
	PaidRides int // ride with its charge recorded and its request finished

	Charges            int // successful charges
	FailedCharges      int // declined charges, which moved no money
	DoubleCharges      int // successful charges beyond the first of one request
	ChargesWithoutRide int

	ReceiptJobs        int // staged or in River
	Receipts           int // receipts sent (ride_receipts rows)
	ReceiptsMissing    int
	ReceiptsDuplicated int

	Violations []Violation
}

// OK reports whether no promise is broken.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// Count returns how many violations of kind were found.
func (r Report) Count(kind Kind) int {
	n := 0
	for _, v := range r.Violations {
		if v.Kind == kind {
			n++
		}
	}
	return n
}

// maxListed bounds the violations String prints; the counts say the rest.
const maxListed = 40

// String summarises the report, listing the first violations.
func (r Report) String() string {
	var b strings.Builder
	if r.OK() {
		b.WriteString("invariants hold\n")
	} else {
		fmt.Fprintf(&b, "INVARIANTS BROKEN: %d violations\n", len(r.Violations))
	}
	fmt.Fprintf(&b, "  keys          %d: finished %d (201: %d, 402: %d), unfinished %d, needing attention %d\n",
		r.Keys, r.KeysFinished, r.KeysCreated, r.KeysDeclined, r.KeysUnfinished, r.KeysNeedAttention)
	fmt.Fprintf(&b, "  rides         %d, paid %d\n", r.Rides, r.PaidRides)
	fmt.Fprintf(&b, "  charges       %d succeeded, %d declined; double charges %d, without a ride %d\n",
		r.Charges, r.FailedCharges, r.DoubleCharges, r.ChargesWithoutRide)
	fmt.Fprintf(&b, "  receipts      %d jobs; %d sent, missing %d, duplicated %d\n",
		r.ReceiptJobs, r.Receipts, r.ReceiptsMissing, r.ReceiptsDuplicated)
	for i, v := range r.Violations {
		if i == maxListed {
			fmt.Fprintf(&b, "  ... and %d more\n", len(r.Violations)-maxListed)
			break
		}
		fmt.Fprintf(&b, "  - %s\n", v)
	}
	return b.String()
}

// add records a violation and returns it, for its ids to be set.
func (r *Report) add(kind Kind, format string, args ...any) *Violation {
	r.Violations = append(r.Violations, Violation{Kind: kind, Detail: fmt.Sprintf(format, args...)})
	return &r.Violations[len(r.Violations)-1]
}

// check compares what the database says with what Stripe says.
func (st *state) check(opts Options) Report {
	var r Report

	keys := map[int64]*key{}
	for _, k := range st.keys {
		keys[k.ID] = k
	}
	ridesByID := map[int64]*ride{}
	rideOfKey := map[int64]*ride{}
	for _, rd := range st.rides {
		ridesByID[rd.ID] = rd
		if rd.IdempotencyKeyID != nil {
			rideOfKey[*rd.IdempotencyKeyID] = rd
		}
	}
	// keyOf is the key of a ride, nil when the ride has none (the reaper
	// removed it) or the key is gone.
	keyOf := func(rd *ride) *key {
		if rd.IdempotencyKeyID == nil {
			return nil
		}
		return keys[*rd.IdempotencyKeyID]
	}
	// A paid ride's request is over: its charge is recorded and its key
	// finished (or reaped, which only happens to old keys).
	paid := func(rd *ride) bool {
		if rd.StripeChargeID == nil {
			return false
		}
		k := keyOf(rd)
		return k == nil || k.RecoveryPoint == idem.Finished
	}

	// A newer charge names its request by its user and Idempotency-Key
	// (rides.ChargeRequest): its key is the one of that request, and its
	// ride the key's.
	keyOfRequest := map[string]*key{}
	for _, k := range st.keys {
		keyOfRequest[strconv.FormatInt(k.UserID, 10)+"/"+k.IdempotencyKey] = k
	}

	succeeded := map[string]charge{}
	byRequest := map[string][]charge{} // by the request a charge names, else metadata idempotency_key_identity, else idempotency_key_id, else ride_id
	byKey := map[int64][]charge{}
	for _, c := range st.charges {
		if !c.Succeeded {
			r.FailedCharges++
			continue
		}
		r.Charges++
		succeeded[c.ID] = c
		if c.UserID != "" && c.Key != "" {
			if k := keyOfRequest[c.UserID+"/"+c.Key]; k != nil {
				c.KeyID = strconv.FormatInt(k.ID, 10)
				if rd := rideOfKey[k.ID]; rd != nil {
					c.RideID = strconv.FormatInt(rd.ID, 10)
				}
			}
		}
		// An id can name two requests once a failover has lost one of
		// them; the identity names one. A charge whose identity is not
		// its key's is the lost request's: no ride accounts for it.
		if id, err := strconv.ParseInt(c.KeyID, 10, 64); err == nil && c.Identity != "" && keys[id] != nil &&
			(keys[id].Identity == nil || *keys[id].Identity != c.Identity) {
			r.ChargesWithoutRide++
			r.add(ChargeWithoutRide, "charge %s names key %d, but its key identity %s is another request's (ride_id=%q)",
				c.ID, id, c.Identity, c.RideID).ChargeID = c.ID
			continue
		}
		request := "key " + c.KeyID
		switch {
		case c.KeyID != "":
		case c.UserID != "" && c.Key != "":
			// Its request's key is gone: lost with the database's commits.
			request = fmt.Sprintf("user %s's request under key %q", c.UserID, c.Key)
		default:
			request = "ride " + c.RideID
		}
		byRequest[request] = append(byRequest[request], c)
		if id, err := strconv.ParseInt(c.KeyID, 10, 64); err == nil {
			byKey[id] = append(byKey[id], c)
		}
	}

	// No money moved without a ride, and only once per request.
	for _, request := range sortedKeys(byRequest) {
		charges := byRequest[request]
		if len(charges) > 1 {
			r.DoubleCharges += len(charges) - 1
			r.add(DoubleCharge, "%s (customer %s): %d successful charges %s",
				request, charges[0].Customer, len(charges), chargeIDs(charges))
		}
		// Unless the ride records one of them, each one is unaccounted for.
		recorded := false
		for _, c := range charges {
			rideID, err := strconv.ParseInt(c.RideID, 10, 64)
			rd := ridesByID[rideID]
			switch {
			case err != nil || rd == nil:
				r.ChargesWithoutRide++
				r.add(ChargeWithoutRide, "charge %s (customer %s, metadata ride_id=%q idempotency_key_id=%q) names no ride",
					c.ID, c.Customer, c.RideID, c.KeyID).ChargeID = c.ID
				continue
			case c.KeyID != "" && rd.IdempotencyKeyID != nil && strconv.FormatInt(*rd.IdempotencyKeyID, 10) != c.KeyID:
				r.ChargesWithoutRide++
				r.add(ChargeWithoutRide, "charge %s names ride %d of key %d, but says it is for key %s",
					c.ID, rd.ID, *rd.IdempotencyKeyID, c.KeyID).ChargeID = c.ID
				continue
			}
			if c.Amount != rd.Amount || c.Currency != rd.Currency || c.Amount != rides.Price || c.Currency != rides.Currency {
				r.add(AmountMismatch, "charge %s is %d %s for ride %d priced %d %s (the price is %d %s)",
					c.ID, c.Amount, c.Currency, rd.ID, rd.Amount, rd.Currency, rides.Price, rides.Currency)
			}
			if rd.StripeChargeID != nil && *rd.StripeChargeID == c.ID {
				recorded = true
			}
		}
		if recorded || len(charges) == 0 {
			continue
		}
		c := charges[0]
		rideID, _ := strconv.ParseInt(c.RideID, 10, 64)
		rd := ridesByID[rideID]
		if rd == nil {
			continue // reported above
		}
		// A request charged and then cut off before recording the charge
		// is fine while it is resumable: its retry gets the same charge
		// back from Stripe and records it.
		if k := keyOf(rd); opts.AllowUnfinished && k != nil && k.RecoveryPoint != idem.Finished {
			continue
		}
		records := "no charge"
		if rd.StripeChargeID != nil {
			records = *rd.StripeChargeID
		}
		// A request the reaper gave up on is listed for a human; say so.
		note := ""
		if id, err := strconv.ParseInt(c.KeyID, 10, 64); err == nil && st.abandonedIDs[id] {
			note = "; the request was reaped unfinished, see abandoned_requests"
		}
		r.add(ChargeNotRecorded, "charge %s of %s is not recorded on ride %d (which records %s%s)",
			c.ID, request, rd.ID, records, note)
	}

	// Every key finished, or still resumable; every 201 paid for once.
	for _, k := range st.keys {
		r.Keys++
		if k.AttentionReason != nil {
			r.KeysNeedAttention++
			if !opts.AllowAttention {
				r.add(KeyNeedsAttention, "key %d at %s set aside for a human: %s", k.ID, k.RecoveryPoint, *k.AttentionReason)
			}
		}
		if want, ok := statusOf(k); ok {
			if rd := rideOfKey[k.ID]; rd != nil && rd.Status != want {
				r.add(StatusMismatch, "key %d (%s) has ride %d %s, not %s", k.ID, keyState(k), rd.ID, rd.Status, want)
			}
		}
		if k.RecoveryPoint != idem.Finished {
			r.KeysUnfinished++
			switch {
			case !opts.AllowUnfinished:
				r.add(KeyUnfinished, "key %d stopped at %s (%s)", k.ID, k.RecoveryPoint, lockState(k))
			case k.LockLive:
				r.add(KeyWedged, "key %d at %s is held by a live lock, but nothing runs", k.ID, k.RecoveryPoint)
			}
			continue
		}
		r.KeysFinished++
		if k.Locked {
			r.add(KeyWedged, "key %d is finished but still locked", k.ID)
		}
		code := 0
		if k.ResponseCode != nil {
			code = *k.ResponseCode
		}
		if code != http.StatusCreated {
			if code == http.StatusPaymentRequired {
				r.KeysDeclined++
			}
			if charges := byKey[k.ID]; len(charges) > 0 {
				r.add(ChargeOnFailedKey, "key %d answered %d but its customer was charged: %s", k.ID, code, chargeIDs(charges))
			}
			continue
		}
		r.KeysCreated++
		rd := rideOfKey[k.ID]
		switch {
		case rd == nil:
			r.add(MissingCharge, "key %d answered 201 but has no ride", k.ID)
			continue
		case len(byKey[k.ID]) == 0:
			r.add(MissingCharge, "key %d answered 201 for ride %d, but Stripe has no successful charge for it", k.ID, rd.ID)
		case rd.StripeChargeID == nil:
			r.add(MissingCharge, "key %d answered 201 but ride %d records no charge", k.ID, rd.ID)
		}
		var body struct {
			ID             int64  `json:"id"`
			StripeChargeID string `json:"stripe_charge_id"`
		}
		if err := json.Unmarshal(k.ResponseBody, &body); err != nil || body.ID != rd.ID || body.StripeChargeID != deref(rd.StripeChargeID) {
			r.add(ResponseMismatch, "key %d stored a 201 for ride %d charge %q, but made ride %d charge %q",
				k.ID, body.ID, body.StripeChargeID, rd.ID, deref(rd.StripeChargeID))
		}
	}

	// Rides: recorded charges exist; each paid ride gets one receipt.
	for _, rd := range st.rides {
		r.Rides++
		if rd.Amount != rides.Price || rd.Currency != rides.Currency {
			r.add(AmountMismatch, "ride %d is priced %d %s, not %d %s", rd.ID, rd.Amount, rd.Currency, rides.Price, rides.Currency)
		}
		if rd.StripeChargeID != nil {
			if _, ok := succeeded[*rd.StripeChargeID]; !ok {
				r.add(MissingCharge, "ride %d records charge %s, which Stripe does not have as a successful charge of its customer",
					rd.ID, *rd.StripeChargeID)
			}
		}
		jobs := st.stagedJobs[rd.ID] + st.riverJobs[rd.ID]
		sent := st.receipts[rd.ID]
		r.ReceiptJobs += jobs
		r.Receipts += sent
		if sent > 1 {
			r.ReceiptsDuplicated += sent - 1
			r.add(ReceiptDuplicated, "ride %d has %d receipts", rd.ID, sent)
		}
		if !paid(rd) {
			if jobs > 0 {
				r.add(ReceiptJobUnpaid, "ride %d is not paid but has %d receipt jobs", rd.ID, jobs)
			}
			if sent > 0 {
				r.add(ReceiptUnpaid, "ride %d is not paid but its receipt was sent", rd.ID)
			}
			continue
		}
		r.PaidRides++
		switch {
		// River deletes finished jobs after a while; a sent receipt
		// shows the job existed.
		case jobs == 0 && sent == 0:
			r.add(ReceiptJobMissing, "paid ride %d has no receipt job", rd.ID)
		case jobs > 1:
			r.add(ReceiptJobDuplicated, "ride %d has %d receipt jobs (%d staged, %d in River)",
				rd.ID, jobs, st.stagedJobs[rd.ID], st.riverJobs[rd.ID])
		}
		if opts.ReceiptsDrained && sent == 0 {
			r.ReceiptsMissing++
			r.add(ReceiptMissing, "paid ride %d has no receipt although the worker drained its queue", rd.ID).RideID = rd.ID
		}
	}
	for _, jobs := range []map[int64]int{st.stagedJobs, st.riverJobs} {
		for _, rideID := range sortedKeys(jobs) {
			if ridesByID[rideID] == nil {
				r.ReceiptJobs += jobs[rideID]
				r.add(ReceiptJobUnpaid, "%d receipt jobs for ride %d, which does not exist", jobs[rideID], rideID)
			}
		}
	}
	return r
}

// statusOf is the status a ride must have, given its key, where the key
// alone decides it.
func statusOf(k *key) (rides.Status, bool) {
	switch {
	case k.RecoveryPoint == idem.Finished && k.ResponseCode != nil && *k.ResponseCode == http.StatusPaymentRequired:
		return rides.StatusDeclined, true
	case k.RecoveryPoint == idem.Finished && k.ResponseCode != nil && *k.ResponseCode == http.StatusBadGateway:
		return rides.StatusFailed, true
	case k.RecoveryPoint != idem.Finished && k.AttentionReason != nil:
		return rides.StatusNeedsReview, true
	}
	return "", false
}

func keyState(k *key) string {
	if k.ResponseCode != nil {
		return fmt.Sprintf("finished with %d", *k.ResponseCode)
	}
	if k.AttentionReason != nil {
		return "set aside at " + string(k.RecoveryPoint)
	}
	return "at " + string(k.RecoveryPoint)
}

func lockState(k *key) string {
	switch {
	case k.LockLive:
		return "held by a live lock"
	case k.Locked:
		return "stale lock, resumable"
	default:
		return "unlocked, resumable"
	}
}

func chargeIDs(charges []charge) string {
	ids := make([]string, len(charges))
	for i, c := range charges {
		ids[i] = c.ID
	}
	return strings.Join(ids, ", ")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func sortedKeys[K int64 | string, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
