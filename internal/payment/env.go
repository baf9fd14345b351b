package payment

import (
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/rocketrides/rocketrides/internal/platform/config"
)

// MinTimeout is STRIPE_TIMEOUT's floor; the setting's Help says why.
const MinTimeout = time.Second

// Variables are how every process that talks to Stripe reaches it.
var Variables = config.Declare(
	config.Setting{Name: "STRIPE_API_KEY", Type: config.TypeString, Required: true, Secret: true,
		Help: "a Stripe secret key; any sk_test_ key for the local fake"},
	config.Setting{Name: "STRIPE_API_BASE", Type: config.TypeURL,
		Help: "another Stripe than api.stripe.com, without /v1, such as the local fake (http://127.0.0.1:12111); unset is Stripe itself; http:// or https:// only. Only one on a loopback host (localhost, 127.0.0.1, ::1) counts as a stand-in for Stripe, which may remember keys longer than Stripe's 24h (STRIPE_KEY_RETENTION): any other host may be a route to Stripe"},
	config.Setting{Name: "STRIPE_TIMEOUT", Type: config.TypeDuration, Min: MinTimeout,
		Help: "how long one HTTP attempt to Stripe may take; at least 1s: Stripe answers a charge in a few hundred milliseconds, more when a card network is slow, and an attempt cut off sooner may leave a charge Stripe made while the request answers 503 (a retry with the same key finds it); less than a second is a slip of the unit (20ms for 20s)"},
)

// ConfigFromEnv reads how to reach Stripe from env, the same way in every
// process that talks to it (Settings).
func ConfigFromEnv(env *config.Env) Config {
	cfg := Config{
		APIKey:  env.Required("STRIPE_API_KEY"),
		BaseURL: env.String("STRIPE_API_BASE", ""),
		Timeout: env.Duration("STRIPE_TIMEOUT", DefaultTimeout),
	}
	if cfg.BaseURL != "" && !httpURL(cfg.BaseURL) {
		env.Refuse("STRIPE_API_BASE", "must be an http:// or https:// URL (Stripe's API is HTTP)")
		cfg.BaseURL = ""
	}
	return cfg
}

// httpURL reports whether u is an http:// or https:// URL.
func httpURL(u string) bool {
	parsed, err := url.Parse(u)
	return err == nil && (parsed.Scheme == "http" || parsed.Scheme == "https") && parsed.Host != ""
}

// StandIn reports whether baseURL, a Config.BaseURL (STRIPE_API_BASE),
// points at a stand-in for Stripe rather than at Stripe, for the rules
// that hold only because of how the real Stripe behaves: that it forgets
// an idempotency key after 24 hours (rides' STRIPE_KEY_RETENTION).
//
// A stand-in is a server on a loopback host (localhost, 127.0.0.0/8,
// ::1): a process on this machine, which is how make dev, the tests and
// the bench run the Stripe fake. Nothing else is one. Unset is
// api.stripe.com, and any other host, whatever its name (fakestripe in
// docker-compose.yml, stripe-proxy.internal), cannot be told from a route
// to Stripe, so it is held to Stripe's rules: refusing a setting there
// costs a demo one line, and trusting it could charge a customer twice.
// A proxy to Stripe on loopback is no stand-in either; no name can show
// that, so STRIPE_KEY_RETENTION's Help warns against it.
func StandIn(baseURL string) bool {
	if baseURL == "" || !httpURL(baseURL) {
		return false
	}
	u, _ := url.Parse(baseURL) // parsed by httpURL
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
