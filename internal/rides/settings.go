package rides

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables are the ride request's own (the api's and the completer's),
// besides payment's and idem's, which SettingsFromEnv reads too.
var Variables = config.Declare(
	config.Setting{Name: "STRIPE_KEY_RETENTION", Type: config.TypeDuration,
		Help:     "how long Stripe remembers an idempotency key; a charge retried later than this after its first attempt lists the customer's charges before charging",
		Trades:   "must not exceed Stripe's real retention (24h): longer, and a retry past Stripe's memory charges again without looking first, a double charge; shorter costs a look-up on more retries",
		Failures: "Four assumptions: claim, intent, memory, boundary (boundary: Stripe forgets keys after 24 hours)"},
	config.Setting{Name: "MAX_CHARGE_ATTEMPTS", Type: config.TypeInt, Unit: "attempts",
		Help:     "charge attempts with an unknown outcome (an error Stripe may have acted on) before a key is set aside for a person",
		Trades:   "more: a key Stripe keeps answering ambiguously is retried longer before a person looks; fewer: keys are set aside (502 payment_needs_review) sooner",
		Failures: "Four assumptions: claim, intent, memory, boundary (boundary: an error that may have executed and keeps replaying)"},
	config.Setting{Name: "SIMULATED_ERRORS", Type: config.TypeBool,
		Help: "accept raise_error=true, which fails a request on purpose after its ride is created (the simulator uses it to give the completer work)"},
)
