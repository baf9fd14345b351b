package payment

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/rocketrides/rocketrides/internal/platform/config"
)

// MinTimeout and MaxTimeout are STRIPE_TIMEOUT's floor and ceiling; the
// setting's Help says why.
const (
	MinTimeout = time.Second
	MaxTimeout = 5 * time.Minute
)

// Variables are how every process that talks to Stripe reaches it.
var Variables = config.Declare(
	config.Setting{Name: "STRIPE_API_KEY", Type: config.TypeString, Required: true, Secret: true,
		Help: "a Stripe secret key, sk_test_... or sk_live_... (or a restricted rk_ key); any sk_test_ key for the local fake. A publishable key (pk_) is refused: Stripe refuses it every charge, and every ride would stay pending"},
	config.Setting{Name: "STRIPE_API_BASE", Type: config.TypeURL,
		Help: "another Stripe than api.stripe.com, without /v1, such as the local fake (http://127.0.0.1:12111); unset is Stripe itself; http:// or https:// only. Only one on a loopback address (all of 127.0.0.0/8, ::1, an IPv4-mapped 127 address such as ::ffff:127.0.0.1, or the name localhost), decided by parsing the address, counts as a stand-in for Stripe, which may remember keys longer than Stripe's 24h (STRIPE_KEY_RETENTION): any other host may be a route to Stripe"},
	config.Setting{Name: "STRIPE_TIMEOUT", Type: config.TypeDuration, Min: MinTimeout, Max: MaxTimeout,
		Help: "how long one HTTP attempt to Stripe may take; at least 1s: Stripe answers a charge in a few hundred milliseconds, more when a card network is slow, and an attempt cut off sooner may leave a charge Stripe made while the request answers 503 (a retry with the same key finds it); less than a second is a slip of the unit (20ms for 20s); at most 5m, and below IDEMPOTENCY_LOCK_TIMEOUT where a process reads both: a request holds its key's lock through the attempt, and an attempt that outlasts the lock lets a retry take the key over while the charge is in flight"},
)

// ConfigFromEnv reads how to reach Stripe from env, the same way in every
// process that talks to it (Settings).
func ConfigFromEnv(env *config.Env) Config {
	cfg := Config{
		APIKey:  env.Required("STRIPE_API_KEY"),
		BaseURL: env.String("STRIPE_API_BASE", ""),
		Timeout: env.Duration("STRIPE_TIMEOUT", DefaultTimeout),
	}
	if why := keyProblem(cfg.APIKey); why != "" {
		env.Refuse("STRIPE_API_KEY", why)
	}
	if cfg.BaseURL != "" && !httpURL(cfg.BaseURL) {
		env.Refuse("STRIPE_API_BASE", "must be an http:// or https:// URL (Stripe's API is HTTP)")
		cfg.BaseURL = ""
	}
	return cfg
}

// secretKey is the form of a Stripe secret or restricted key: its prefix,
// its mode, and letters, digits and '_' (the fake's keys use '_' too).
var secretKey = regexp.MustCompile(`^[sr]k_(test|live)_[A-Za-z0-9_]+$`)

// keyProblem says what is wrong with key as a Stripe secret key, or "".
// An unset key is Env.Required's to refuse.
func keyProblem(key string) string {
	switch {
	case key == "" || secretKey.MatchString(key):
		return ""
	case strings.HasPrefix(key, "pk_"):
		return "a publishable key (pk_), which Stripe refuses for charges: set the secret key (sk_test_... or sk_live_...)"
	}
	return "not a Stripe secret key: it must look like sk_test_..., sk_live_... or a restricted rk_ key"
}

// RefuseTimeoutPastLock refuses, in env, a STRIPE_TIMEOUT (cfg.Timeout) at
// or above lockTimeout (IDEMPOTENCY_LOCK_TIMEOUT), in a process that calls
// Stripe under a key's lock: an attempt that outlasts the lock lets a
// retry take the key over while the charge is still in flight, and the
// request that made it fails with lock_lost.
func RefuseTimeoutPastLock(env *config.Env, cfg Config, lockTimeout time.Duration) {
	if cfg.Timeout > 0 && lockTimeout > 0 && cfg.Timeout >= lockTimeout {
		env.Refuse("STRIPE_TIMEOUT", fmt.Sprintf(
			"must be below IDEMPOTENCY_LOCK_TIMEOUT (%s): a request holds its key's lock through its Stripe attempt, and one that outlasts the lock lets a retry take the key over while the charge is in flight",
			config.FormatDuration(lockTimeout)))
	}
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
// A stand-in is a server on a loopback address: a process on this
// machine, which is how make dev, the tests and the bench run the Stripe
// fake. The host is parsed as an address (net/netip), so that every
// spelling of loopback counts, 127.0.0.2 and ::ffff:127.0.0.1 as much as
// 127.0.0.1 and ::1; the one name is localhost, which resolves to
// loopback by definition (RFC 6761). Nothing else is one. Unset is
// api.stripe.com, and any other host, whatever its name (fakestripe in
// docker-compose.yml, stripe-proxy.internal, 127.0.0.1.nip.io), cannot be
// told from a route to Stripe, so it is held to Stripe's rules: refusing
// a setting there costs a demo one line, and trusting it could charge a
// customer twice. A proxy to Stripe on loopback is no stand-in either; no
// address can show that, so STRIPE_KEY_RETENTION's Help warns against it.
func StandIn(baseURL string) bool {
	if baseURL == "" || !httpURL(baseURL) {
		return false
	}
	u, _ := url.Parse(baseURL) // parsed by httpURL
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return true
	}
	addr, err := netip.ParseAddr(host)
	return err == nil && addr.Unmap().IsLoopback()
}
