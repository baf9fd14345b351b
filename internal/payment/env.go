package payment

import (
	"github.com/rocketrides/rocketrides/internal/platform/config"
)

// Variables are how every process that talks to Stripe reaches it.
var Variables = config.Declare(
	config.Setting{Name: "STRIPE_API_KEY", Type: config.TypeString, Required: true, Secret: true,
		Help: "a Stripe secret key; any sk_test_ key for the local fake"},
	config.Setting{Name: "STRIPE_API_BASE", Type: config.TypeURL,
		Help: "another Stripe than api.stripe.com, without /v1, such as the local fake (http://127.0.0.1:12111); unset is Stripe itself"},
	config.Setting{Name: "STRIPE_TIMEOUT", Type: config.TypeDuration,
		Help: "how long one HTTP attempt to Stripe may take"},
)

// ConfigFromEnv reads how to reach Stripe from env, the same way in every
// process that talks to it (Settings).
func ConfigFromEnv(env *config.Env) Config {
	return Config{
		APIKey:  env.Required("STRIPE_API_KEY"),
		BaseURL: env.String("STRIPE_API_BASE", ""),
		Timeout: env.Duration("STRIPE_TIMEOUT", DefaultTimeout),
	}
}
