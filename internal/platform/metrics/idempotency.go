package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcome is what became of a request's idempotency key.
type Outcome uint8

// The outcomes, as the outcome label spells them.
const (
	// OutcomeNew: the key was seen for the first time and claimed.
	OutcomeNew Outcome = iota
	// OutcomeReplay: the key had finished; its stored response was sent.
	OutcomeReplay
	// OutcomeInFlightConflict: another request held the key's lock (409).
	OutcomeInFlightConflict
	// OutcomeReuseMismatch: the key was used for a different request (422).
	OutcomeReuseMismatch
	// OutcomeLockTakeover: the key's lock had gone stale (its holder
	// presumably died) and was taken over.
	OutcomeLockTakeover
	// OutcomeResumed: an unfinished, unlocked key (released after a
	// failure) was claimed again to resume from its recovery point.
	OutcomeResumed
	// OutcomeLockLost: a request found its lock taken over when it tried
	// to move the key (fencing at work).
	OutcomeLockLost
	// OutcomeNeedsAttention: a key was set aside for a human.
	OutcomeNeedsAttention
	// OutcomeExpired: a request came back with a key the reaper had
	// deleted, and was refused (410).
	OutcomeExpired

	numOutcomes
)

var outcomeNames = [numOutcomes]string{
	"new", "replay", "in_flight_conflict", "reuse_mismatch",
	"lock_takeover", "resumed", "lock_lost", "needs_attention", "expired",
}

func (o Outcome) String() string { return outcomeNames[o] }

// Idempotency counts idempotency-key outcomes and times atomic phases.
type Idempotency struct {
	outcomes [numOutcomes]prometheus.Counter
	phases   *prometheus.HistogramVec
}

// NewIdempotency registers the idempotency-key metrics on reg.
func NewIdempotency(reg prometheus.Registerer) *Idempotency {
	outcomes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace,
		Name:      "idempotency_outcomes_total",
		Help:      "What became of idempotency keys: new, replay, in_flight_conflict, reuse_mismatch, lock_takeover, resumed, lock_lost, needs_attention, expired.",
	}, []string{"outcome"})
	m := &Idempotency{
		phases: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "atomic_phase_duration_seconds",
			Help:      "Time to run an atomic phase (one transaction, retries included), by the recovery point it starts from.",
			Buckets:   []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"recovery_point"}),
	}
	// Resolved once: every outcome is exported from the start, at zero,
	// and counting one is a single atomic add.
	for o := range numOutcomes {
		m.outcomes[o] = outcomes.WithLabelValues(o.String())
	}
	reg.MustRegister(outcomes, m.phases)
	return m
}

// Outcome counts one outcome.
func (m *Idempotency) Outcome(o Outcome) {
	if m == nil || o >= numOutcomes {
		return
	}
	m.outcomes[o].Inc()
}

// PhaseDone records an atomic phase that started at start from recovery
// point from. It takes the start time rather than a duration so that one
// deferred call times a whole function:
//
//	defer m.PhaseDone(string(key.RecoveryPoint), time.Now())
func (m *Idempotency) PhaseDone(from string, start time.Time) {
	if m == nil {
		return
	}
	m.phases.WithLabelValues(from).Observe(time.Since(start).Seconds())
}
