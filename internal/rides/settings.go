package rides

import (
	"fmt"
	"time"

	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/platform/config"
)

// Variables are the ride request's own (the api's and the completer's),
// besides payment's and idem's, which SettingsFromEnv reads too.
var Variables = config.Declare(
	config.Setting{Name: "STRIPE_KEY_RETENTION", Type: config.TypeDuration,
		Help:     "how long Stripe remembers an idempotency key; a charge retried later than this after its first attempt lists the customer's charges before charging; above 24h it is refused unless STRIPE_API_BASE is a stand-in on a loopback host (never raise it for a proxy to Stripe there)",
		Trades:   "must not exceed Stripe's real retention (24h): longer, and a retry past Stripe's memory charges again without looking first, a double charge; shorter costs a look-up on more retries",
		Failures: "Four assumptions: claim, intent, memory, boundary (boundary: Stripe forgets keys after 24 hours)"},
	config.Setting{Name: "MAX_CHARGE_ATTEMPTS", Type: config.TypeInt, Unit: "attempts",
		Help:     "charge attempts with an unknown outcome (an error Stripe may have acted on) before a key is set aside for a person",
		Trades:   "more: a key Stripe keeps answering ambiguously is retried longer before a person looks; fewer: keys are set aside (502 payment_needs_review) sooner",
		Failures: "Four assumptions: claim, intent, memory, boundary (boundary: an error that may have executed and keeps replaying)"},
	config.Setting{Name: "SIMULATED_ERRORS", Type: config.TypeBool,
		Help: "accept raise_error=true, which fails a request on purpose after its ride is created (the simulator uses it to give the completer work)"},
)

// MaxStripeKeyRetention is how long Stripe keeps an idempotency key: at
// least 24 hours, its documentation says, and no promise beyond.
const MaxStripeKeyRetention = 24 * time.Hour

// refuseDoubleCharge refuses, in env, a STRIPE_KEY_RETENTION above
// Stripe's 24 hours against anything but a stand-in for Stripe
// (payment.StandIn): the api would trust Stripe to dedupe a retry that
// Stripe has forgotten, and charge it again without looking first.
func refuseDoubleCharge(env *config.Env, s Settings) {
	if s.StripeKeyRetention > MaxStripeKeyRetention && !payment.StandIn(s.Stripe.BaseURL) {
		env.Refuse("STRIPE_KEY_RETENTION", fmt.Sprintf(
			"above Stripe's %s, a retry past Stripe's memory charges the customer again; only a stand-in for Stripe may keep keys longer (STRIPE_API_BASE on a loopback address: 127.0.0.0/8, ::1 or localhost)",
			config.FormatDuration(MaxStripeKeyRetention)))
	}
}
