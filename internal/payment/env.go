package payment

import (
	"os"

	"github.com/rocketrides/rocketrides/internal/platform/config"
)

// ConfigFromEnv reads how to reach Stripe from env, the same way in every
// process that talks to it:
//
//	STRIPE_API_KEY   required; sk_test_ keys for the local fake
//	STRIPE_API_BASE  another Stripe than api.stripe.com, such as the fake
//	STRIPE_TIMEOUT   one HTTP attempt, default DefaultTimeout; 0 is refused
func ConfigFromEnv(env *config.Env) Config {
	return Config{
		APIKey:  env.Required("STRIPE_API_KEY"),
		BaseURL: os.Getenv("STRIPE_API_BASE"),
		Timeout: env.Duration("STRIPE_TIMEOUT", DefaultTimeout),
	}
}
