package ratelimit

import (
	"time"

	"github.com/rocketrides/rocketrides/internal/platform/config"
)

// The limits' defaults, each with its reason in its setting's Help.
const (
	DefaultTokenRequests      = 600
	DefaultTokenWindow        = time.Minute
	DefaultAuthFailures       = 50
	DefaultAuthFailuresWindow = 5 * time.Minute
	DefaultCharges            = 10
	DefaultChargesWindow      = time.Hour
)

// Switch is RATE_LIMITS, which turns every limit off at once.
const Switch = "RATE_LIMITS"

// MinWindow is every window's floor: the RateLimit fields count in whole
// seconds.
const MinWindow = time.Second

// Variables are the rate limits'. The api reads them all; the completer,
// which runs ride requests too, reads the charge cap (and RATE_LIMITS).
var Variables = config.Declare(
	config.Setting{Name: Switch, Type: config.TypeString,
		Help: "on, or off to turn every RATE_LIMIT_ limit off at once, whatever each is set to: for load tools only (the bench, the chaos soak, and make dev, whose simulator sends a ride a second with one token), never for an api that the public reaches"},
	config.Setting{Name: "RATE_LIMIT_TOKEN_REQUESTS", Type: config.TypeInt, Unit: "requests", Zero: "no limit on an API token's requests",
		Help: "requests one API token may make per RATE_LIMIT_TOKEN_WINDOW, counted across every api instance; the next are refused 429 rate_limited (policy \"token\") until the window ends. A rider's app makes a few a minute (a ride, then polling it while it is pending), so 600 a minute is far above any rider and far below what one token managed in an abuse test (672 charges a second). Every request counts, a replay of a finished key too"},
	config.Setting{Name: "RATE_LIMIT_TOKEN_WINDOW", Type: config.TypeDuration, Min: MinWindow,
		Help: "the window RATE_LIMIT_TOKEN_REQUESTS counts in, in whole seconds, at least 1s: the RateLimit header fields count in seconds. A window starts with the token's first request, and the first request after it ends starts the next"},
	config.Setting{Name: "RATE_LIMIT_AUTH_FAILURES", Type: config.TypeInt, Unit: "failures", Zero: "no limit on failed authentication",
		Help: "failed authentications (401) one client address may cause per RATE_LIMIT_AUTH_FAILURES_WINDOW, counted across every api instance; then every request from the address is refused 429 rate_limited (policy \"failed_auth\") until the window ends, one with a valid token too, so that a guess that hits cannot be told from one that misses. An honest client with a stale token fails once and stops (a 401 is final), so 50 leaves room for many such clients behind one NAT, while someone trying leaked or guessed tokens gets 50 tries in five minutes instead of thousands a second. An IPv6 address counts by its /64, which one host can hold whole. The address is the connection's: behind a proxy every client has the proxy's, so limit there and set 0"},
	config.Setting{Name: "RATE_LIMIT_AUTH_FAILURES_WINDOW", Type: config.TypeDuration, Min: MinWindow,
		Help: "the window RATE_LIMIT_AUTH_FAILURES counts in, in whole seconds, at least 1s: the RateLimit header fields count in seconds"},
	config.Setting{Name: "RATE_LIMIT_CHARGES", Type: config.TypeInt, Unit: "charges", Zero: "no limit on a user's charges",
		Help:     "rides, each a charge whether or not the card is declined, one user may request in any RATE_LIMIT_CHARGES_WINDOW, counted across every api instance and the completer; one more is refused 429 rate_limited (policy \"charges\") before its ride or charge exists, and nothing is stored on its key, so the same key succeeds once the user's oldest counted charge has left the window (Retry-After). Against card testing, which needs many charges: a rider takes a few rides a day, and 10 an hour leaves room for several booked at once. A replay of a finished key is never counted or refused",
		Trades:   "higher lets a stolen token or a card tester make more charges before anything stops it; lower refuses a busy rider's rides (429, retried after the window)",
		Failures: "Abuse: rate limits (card testing)"},
	config.Setting{Name: "RATE_LIMIT_CHARGES_WINDOW", Type: config.TypeDuration, Min: MinWindow,
		Help: "the window RATE_LIMIT_CHARGES counts in, in whole seconds, at least 1s: the RateLimit header fields count in seconds. It slides: a charge counts for one window after it and at most a tenth of one more, so no window of this length, wherever it starts, holds more than RATE_LIMIT_CHARGES"},
)

// EdgeFromEnv reads the limits the api applies to every request before it
// is served: requests per API token, and failed authentications per
// client address. RATE_LIMITS=off turns both off.
func EdgeFromEnv(env *config.Env) (token, failedAuth Policy) {
	on := enabled(env)
	token = policyFromEnv(env, TokenPolicy, "RATE_LIMIT_TOKEN_REQUESTS", DefaultTokenRequests,
		"RATE_LIMIT_TOKEN_WINDOW", DefaultTokenWindow)
	failedAuth = policyFromEnv(env, FailedAuthPolicy, "RATE_LIMIT_AUTH_FAILURES", DefaultAuthFailures,
		"RATE_LIMIT_AUTH_FAILURES_WINDOW", DefaultAuthFailuresWindow)
	if !on {
		token.Quota, failedAuth.Quota = 0, 0
	}
	return token, failedAuth
}

// ChargesFromEnv reads the cap on each user's charges, which every process
// that runs ride requests applies (the api, and the completer, which
// finishes requests their clients left at started). RATE_LIMITS=off turns
// it off.
func ChargesFromEnv(env *config.Env) Policy {
	on := enabled(env)
	charges := policyFromEnv(env, ChargesPolicy, "RATE_LIMIT_CHARGES", DefaultCharges,
		"RATE_LIMIT_CHARGES_WINDOW", DefaultChargesWindow)
	if !on {
		charges.Quota = 0
	}
	return charges
}

// enabled reads RATE_LIMITS: on (the default) or off.
func enabled(env *config.Env) bool {
	switch v := env.String(Switch, "on"); v {
	case "on":
		return true
	case "off":
		return false
	default:
		env.Refuse(Switch, "must be on or off")
		return false
	}
}

// policyFromEnv reads one limit: its quota (0 turns it off) and its
// window, refused unless whole seconds.
func policyFromEnv(env *config.Env, name, quotaVar string, quota int, windowVar string, window time.Duration) Policy {
	p := Policy{Name: name, Quota: env.IntOrZero(quotaVar, quota), Window: env.Duration(windowVar, window)}
	if p.Window%time.Second != 0 {
		env.Refuse(windowVar, "must be whole seconds (the RateLimit header fields count in seconds)")
	}
	return p
}
