package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StripeOperation is a kind of call to Stripe.
type StripeOperation uint8

// The operations, as the operation label spells them.
const (
	// StripeCreateCharge is the ride's foreign state mutation.
	StripeCreateCharge StripeOperation = iota
	// StripeListCharges looks for the charge of an earlier attempt once
	// Stripe may have forgotten its idempotency key (payment's
	// FindCharge).
	StripeListCharges

	numStripeOperations
)

var stripeOperationNames = [numStripeOperations]string{"create_charge", "list_charges"}

func (o StripeOperation) String() string { return stripeOperationNames[o] }

// StripeOutcome is how a call to Stripe ended, sorted by what the caller
// does next. payment.OutcomeOf sorts an error into one; payment's Gateway
// records its calls with it.
type StripeOutcome uint8

// The outcomes, as the outcome label spells them.
const (
	// StripeSucceeded: Stripe answered with what was asked for.
	StripeSucceeded StripeOutcome = iota
	// StripeDeclined: the card was declined (final).
	StripeDeclined
	// StripeRejected: Stripe refused the request itself (final).
	StripeRejected
	// StripeUnavailable: no usable answer (network, timeout, 5xx, 429);
	// the request is retried with the same idempotency key.
	StripeUnavailable

	numStripeOutcomes
)

var stripeOutcomeNames = [numStripeOutcomes]string{"succeeded", "declined", "rejected", "unavailable"}

func (o StripeOutcome) String() string { return stripeOutcomeNames[o] }

// Stripe counts and times calls to Stripe.
type Stripe struct {
	calls    [numStripeOperations][numStripeOutcomes]prometheus.Counter
	duration [numStripeOperations][numStripeOutcomes]prometheus.Observer
}

// NewStripe registers the Stripe metrics on reg.
func NewStripe(reg prometheus.Registerer) *Stripe {
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace,
		Name:      "stripe_requests_total",
		Help:      "Calls to Stripe, by operation and outcome (succeeded, declined, rejected, unavailable).",
	}, []string{"operation", "outcome"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace,
		Name:      "stripe_request_duration_seconds",
		Help:      "Time a call to Stripe took, stripe-go's own retries included, by operation and outcome.",
		Buckets:   []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60},
	}, []string{"operation", "outcome"})
	m := &Stripe{}
	for op := range numStripeOperations {
		for out := range numStripeOutcomes {
			m.calls[op][out] = calls.WithLabelValues(op.String(), out.String())
			m.duration[op][out] = duration.WithLabelValues(op.String(), out.String())
		}
	}
	reg.MustRegister(calls, duration)
	return m
}

// Call records a call to Stripe that started at start.
func (m *Stripe) Call(op StripeOperation, out StripeOutcome, start time.Time) {
	if m == nil || op >= numStripeOperations || out >= numStripeOutcomes {
		return
	}
	m.calls[op][out].Inc()
	m.duration[op][out].Observe(time.Since(start).Seconds())
}
