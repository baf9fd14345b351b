package reconcile

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/rides"
)

// Metadata keys of a Rocket Rides charge (internal/rides). A charge names
// the request that made it, by its user and Idempotency-Key (requestOf),
// and, once recorded, the ride it paid for (tag). A charge of a key made
// before that names its ride and its key's row from the start.
const (
	metadataRideID = rides.MetadataRideID
	// Only on the older charges: the key's id, and its identity where it
	// has one (idempotency_keys.identity): an id can name two requests
	// after a failover lost one of them, the identity cannot.
	metadataIdempotencyKeyID       = "idempotency_key_id"
	metadataIdempotencyKeyIdentity = "idempotency_key_identity"
)

const statusSucceeded = "succeeded"

// charge is a Stripe charge as payment reads it.
type charge = payment.Charge

// ride is a ride with its user's Stripe customer, as reconciliation reads
// it.
type ride struct {
	ID               int64     `db:"id"`
	CreatedAt        time.Time `db:"created_at"`
	Amount           int64     `db:"amount"`
	Currency         string    `db:"currency"`
	StripeChargeID   *string   `db:"stripe_charge_id"`
	IdempotencyKeyID *int64    `db:"idempotency_key_id"`
	// KeyIdentity is the identity of the ride's idempotency key, as text;
	// nil for a newer key, or a reaped one.
	KeyIdentity *string `db:"idempotency_key_identity"`
	// IdempotencyKey is the client's Idempotency-Key of the ride's
	// request; nil once its key is reaped.
	IdempotencyKey *string `db:"idempotency_key"`
	UserID         int64   `db:"user_id"`
	Customer       string  `db:"stripe_customer_id"`
}

// snapshot is everything one reconciliation compares.
type snapshot struct {
	// listed are the charges Stripe listed for the window, failed ones
	// included.
	listed []*charge
	// rides are the rides created in the window, and those a listed
	// charge names or a listed charge's id is recorded on.
	rides []*ride
	// customers maps the Stripe customers of listed charges that are our
	// users' to the user.
	customers map[string]int64
	// fetched are the charges rides record that the list did not
	// contain, looked up one by one; nil where Stripe has no such charge.
	fetched map[string]*charge
	// requests are what the database holds of the requests listed
	// charges name (requestOf).
	requests map[request]knownRequest
}

// compare finds the discrepancies in s. A charge that took money is
// attributed to at most one ride: the ride that records it, else the ride
// its metadata names. Then every ride is checked against the charges
// attributed to it: the one it records must exist and agree with it, and
// any other is money taken twice or money no ride accounts for.
func compare(s snapshot, now time.Time, grace time.Duration) *Report {
	rep := &Report{Rides: len(s.rides)}

	charges := make(map[string]*charge, len(s.listed)+len(s.fetched))
	for _, c := range s.listed {
		charges[c.ID] = c
	}
	for id, c := range s.fetched {
		if c != nil {
			charges[id] = c
		}
	}
	rides := make(map[int64]*ride, len(s.rides))
	recordedBy := make(map[string]*ride, len(s.rides))
	for _, r := range s.rides {
		rides[r.ID] = r
		if r.StripeChargeID != nil {
			recordedBy[*r.StripeChargeID] = r
		}
	}

	attributed := make(map[int64][]*charge)
	for _, c := range s.listed {
		if req, ok := requestOf(c); ok && c.Declined() {
			// A decline answered a request too: one the database lost is
			// restored with its 402.
			if known := s.requests[req]; known.KeyID == nil && !known.Reaped {
				rep.add(LostRide, c.ID, 0, "user %d's request under Idempotency-Key %q was declined, and the database "+
					"holds no such request: it lost the request's commits", req.UserID, req.Key)
			}
			continue
		}
		if !c.TookMoney() {
			continue
		}
		_, hasRide := c.Metadata[metadataRideID]
		_, hasKey := c.Metadata[metadataIdempotencyKeyID]
		_, hasRequest := requestOf(c)
		hasKey = hasKey || hasRequest
		userID, ourCustomer := s.customers[c.Customer]
		if recordedBy[c.ID] == nil && !hasRide && !hasKey && !ourCustomer {
			// Another application's charge on the same Stripe account.
			continue
		}
		rep.Charges++
		if recordedBy[c.ID] != nil {
			continue // checked with the ride that records it
		}
		if req, ok := requestOf(c); ok {
			// The charge names its request: its ride is the request's.
			known := s.requests[req]
			switch {
			case known.KeyID == nil && !known.Reaped:
				rep.add(LostRide, c.ID, 0, "user %d's request under Idempotency-Key %q paid %d %s, and the database "+
					"holds no such request: it lost the request's commits", req.UserID, req.Key, c.Amount, c.Currency)
			case known.RideID == nil || rides[*known.RideID] == nil:
				rep.add(ChargeWithoutRide, c.ID, 0, "user %d's request under Idempotency-Key %q has no ride", req.UserID, req.Key)
			default:
				attributed[*known.RideID] = append(attributed[*known.RideID], c)
			}
			continue
		}
		rawRideID := c.Metadata[metadataRideID]
		rideID, err := strconv.ParseInt(rawRideID, 10, 64)
		var another string // how c shows it was made for another request than its ride's
		if r := rides[rideID]; err == nil && r != nil {
			another = madeForAnother(r, c)
		}
		switch {
		case !hasRide && ourCustomer:
			rep.add(ChargeWithoutRide, c.ID, 0, "no ride_id in its metadata; customer %s is user %d", c.Customer, userID)
		case !hasRide:
			rep.add(ChargeWithoutRide, c.ID, 0, "no ride_id in its metadata (idempotency_key_id %s)", c.Metadata[metadataIdempotencyKeyID])
		case err != nil:
			rep.add(ChargeWithoutRide, c.ID, 0, "metadata ride_id %q is not a ride id", rawRideID)
		case rides[rideID] == nil:
			rep.add(ChargeWithoutRide, c.ID, 0, "metadata ride_id %d names no ride", rideID)
		case another != "":
			rep.add(ChargeWithoutRide, c.ID, 0, "metadata ride_id %d names a ride another request made (%s): "+
				"the ride this charge paid for is gone, and its id was handed out again", rideID, another)
		default:
			attributed[rideID] = append(attributed[rideID], c)
		}
	}

	for _, r := range s.rides {
		var paid *charge // the charge that pays for r
		if r.StripeChargeID != nil {
			id := *r.StripeChargeID
			c := charges[id]
			switch {
			case c == nil:
				rep.add(UnknownCharge, id, r.ID, "ride records charge %s, which Stripe does not have", id)
			case c.Status != statusSucceeded:
				rep.add(Mismatch, id, r.ID, "ride records charge %s, whose status is %s", id, c.Status)
			case c.Refunded:
				// Refunded on purpose by a person; nothing to report, and
				// the ride is not paid by it any more.
			default:
				paid = c
				if diffs := differences(r, c); len(diffs) > 0 {
					rep.add(Mismatch, id, r.ID, "%s", strings.Join(diffs, "; "))
				}
			}
		}

		others := attributed[r.ID]
		slices.SortFunc(others, func(a, b *charge) int {
			return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID))
		})
		if paid == nil && len(others) > 0 {
			// The oldest charge naming the ride is the one its request
			// made; any later one is a double charge on top.
			paid, others = others[0], others[1:]
			switch {
			case r.StripeChargeID == nil && now.Sub(paid.Created) < grace:
				rep.Pending++
			case r.StripeChargeID == nil:
				rep.add(ChargeWithoutRide, paid.ID, r.ID, "ride %d records no charge; charged %s ago",
					r.ID, now.Sub(paid.Created).Truncate(time.Second))
			default:
				rep.add(ChargeWithoutRide, paid.ID, r.ID, "ride %d records %s instead", r.ID, *r.StripeChargeID)
			}
		}
		for _, c := range others {
			rep.add(DoubleCharge, c.ID, r.ID, "ride %d was already charged by %s", r.ID, paid.ID)
		}
	}

	rep.sort()
	return rep
}

// madeForAnother says how charge c, whose metadata names ride r, shows it
// was made by another request than the one that made r, or "" if it does
// not: r's id was handed out again after the ride c paid for was lost, as
// a failover that loses the database's last commits can. The charge is
// then not r's at all, neither its payment nor a double charge on top.
// The key's identity tells; a key's id can be handed out again too, so it
// tells only where a mismatch shows. A ride whose key was reaped cannot
// tell.
func madeForAnother(r *ride, c *charge) string {
	if v, ok := c.Metadata[metadataIdempotencyKeyIdentity]; ok && r.KeyIdentity != nil {
		if v != *r.KeyIdentity {
			return fmt.Sprintf("its key's identity is %s, the charge's %s", *r.KeyIdentity, v)
		}
		return ""
	}
	if v, ok := c.Metadata[metadataIdempotencyKeyID]; ok && r.IdempotencyKeyID != nil && v != strconv.FormatInt(*r.IdempotencyKeyID, 10) {
		return fmt.Sprintf("its key is %d, the charge's %s", *r.IdempotencyKeyID, v)
	}
	return ""
}

// differences lists what ride r and the charge c it records disagree on.
func differences(r *ride, c *charge) []string {
	var diffs []string
	if r.Amount != c.Amount {
		diffs = append(diffs, fmt.Sprintf("amount: ride %d, charge %d", r.Amount, c.Amount))
	}
	if !strings.EqualFold(r.Currency, c.Currency) {
		diffs = append(diffs, fmt.Sprintf("currency: ride %s, charge %s", r.Currency, c.Currency))
	}
	if r.Customer != c.Customer {
		diffs = append(diffs, fmt.Sprintf("customer: ride's user %d is %s, charge %s", r.UserID, r.Customer, orNone(c.Customer)))
	}
	if req, ok := requestOf(c); ok {
		// The ride's id reaches the charge later (tag), and a restored
		// ride may have another: the request is what must agree.
		if req.UserID != r.UserID || (r.IdempotencyKey != nil && req.Key != *r.IdempotencyKey) {
			diffs = append(diffs, fmt.Sprintf("request: ride's is user %d's, charge metadata names user %d's under another Idempotency-Key",
				r.UserID, req.UserID))
		}
		return diffs
	}
	if v, ok := c.Metadata[metadataRideID]; ok && v != strconv.FormatInt(r.ID, 10) {
		diffs = append(diffs, fmt.Sprintf("ride_id: charge metadata says %s", v))
	}
	// A reaped key leaves the ride without one; nothing to compare then.
	if v, ok := c.Metadata[metadataIdempotencyKeyID]; ok && r.IdempotencyKeyID != nil && v != strconv.FormatInt(*r.IdempotencyKeyID, 10) {
		diffs = append(diffs, fmt.Sprintf("idempotency_key_id: ride %d, charge metadata %s", *r.IdempotencyKeyID, v))
	}
	if v, ok := c.Metadata[metadataIdempotencyKeyIdentity]; ok && r.KeyIdentity != nil && v != *r.KeyIdentity {
		diffs = append(diffs, fmt.Sprintf("idempotency_key_identity: ride's key %s, charge metadata %s", *r.KeyIdentity, v))
	}
	return diffs
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
