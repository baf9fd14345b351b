package payment

import (
	"os"
	"time"

	"github.com/rocketrides/rocketrides/internal/platform/config"
)

// DefaultTimeout bounds one HTTP attempt at Stripe when STRIPE_TIMEOUT is
// unset.
const DefaultTimeout = 20 * time.Second

// ConfigFromEnv reads how to reach Stripe from env, the same way in every
// process that talks to it:
//
//	STRIPE_API_KEY   required; sk_test_ keys for the local fake
//	STRIPE_API_BASE  another Stripe than api.stripe.com, such as the fake
//	STRIPE_TIMEOUT   one HTTP attempt, default DefaultTimeout
func ConfigFromEnv(env *config.Env) Config {
	return Config{
		APIKey:  env.Required("STRIPE_API_KEY"),
		BaseURL: os.Getenv("STRIPE_API_BASE"),
		Timeout: env.Duration("STRIPE_TIMEOUT", DefaultTimeout),
	}
}
