package idem

import (
	"fmt"
	"time"

	"github.com/rocketrides/rocketrides/internal/platform/config"
)

// MinLockTimeout is IDEMPOTENCY_LOCK_TIMEOUT's floor; the setting's Help
// says why. Config.LockTimeout has none: tests take keys over in
// milliseconds on purpose.
const MinLockTimeout = time.Second

// Variables are the key store's: the processes that take keys' locks (the
// api, the completer, the console, the reconciler) and the reaper, which
// leaves locked keys alone and deletes keys past their lifetime, must
// agree on them.
var Variables = config.Declare(
	config.Setting{Name: "IDEMPOTENCY_LOCK_TIMEOUT", Type: config.TypeDuration, Min: MinLockTimeout,
		Help:     "how long a request's lock on its idempotency key protects it; after that a retry, or the completer, may take the key over; at least 1s: a request holds its lock through its atomic phases and its Stripe call, hundreds of milliseconds on an ordinary day, and a shorter lock is taken over by any concurrent retry while its request still runs, so 409 request_in_progress protects nothing and the request in flight fails with lock_lost; less than a second is a slip of the unit (90ms for 90s)",
		Trades:   "shorter: a crashed request's key is taken over sooner, but a request that is merely slow loses its key more often (fenced, so never a second charge, but it fails with lock_lost); longer: a retry after a crash waits longer (409 request_in_progress). Must stay below REAPER_MAX_AGE (refused at or above it by every process that reads it) and be the same for the api, the completer and the reaper. It need not stay below COMPLETER_MIN_AGE: the completer claims a key as a retry does and leaves a live lock alone, so a request that crashed holding its lock is completed once both have passed",
		Failures: "Further cases the article does not list (a request stalls past the lock timeout)"},
	config.Setting{Name: "REAPER_MAX_AGE", Type: config.TypeDuration,
		Help:     "a key's lifetime: past it the key is deleted (an unfinished one copied to abandoned_requests first) and a retry with it no longer replays",
		Trades:   "shorter keeps the key table small, but a client retrying later than this gets 410 idempotency_key_expired instead of its answer (the lifetime docs/openapi.yaml publishes); it must exceed IDEMPOTENCY_LOCK_TIMEOUT",
		Failures: "Residual risks, and who notices (keys older than the reaper's horizon)"},
	config.Setting{Name: Pipeline, Type: config.TypeString,
		Help: "on, or off to send each statement of a request's claim and atomic phases to Postgres on its own, in the order the first reading shows them (internal/idem/claim.go and phase.go): the plain path, for reading and comparing; on, the fast path, claims a new or finished key in one statement and sends each phase in one round trip. Both decide the same, each phase fenced by the key's lock token"},
)

// Pipeline is IDEMPOTENCY_PIPELINE, which picks the store's path.
const Pipeline = "IDEMPOTENCY_PIPELINE"

// PlainFromEnv reads IDEMPOTENCY_PIPELINE: on (the default), the fast
// path, or off, the plain path (Config.Plain).
func PlainFromEnv(env *config.Env) bool {
	switch v := env.String(Pipeline, "on"); v {
	case "on":
		return false
	case "off":
		return true
	default:
		env.Refuse(Pipeline, "must be on or off")
		return false
	}
}

// DefaultKeyLifetime is REAPER_MAX_AGE's default: three days of retries.
const DefaultKeyLifetime = 72 * time.Hour

// KeyLifetimeFromEnv reads REAPER_MAX_AGE, a key's lifetime: the reaper
// deletes a key past it, and a retry then gets 410.
func KeyLifetimeFromEnv(env *config.Env) time.Duration {
	return env.Duration("REAPER_MAX_AGE", DefaultKeyLifetime)
}

// LockTimeoutFromEnv reads IDEMPOTENCY_LOCK_TIMEOUT, and refuses it at or
// above the key's lifetime (REAPER_MAX_AGE, read here too), in every
// process that takes or leaves keys' locks: the reaper would delete a key
// whose request may still hold it, and the request's retry would start
// over, charge and all.
func LockTimeoutFromEnv(env *config.Env) time.Duration {
	lock := env.Duration("IDEMPOTENCY_LOCK_TIMEOUT", DefaultLockTimeout)
	if lifetime := KeyLifetimeFromEnv(env); lock > 0 && lifetime > 0 && lock >= lifetime {
		env.Refuse("IDEMPOTENCY_LOCK_TIMEOUT", fmt.Sprintf(
			"must be below REAPER_MAX_AGE (%s), the key's lifetime: the reaper would delete a key while its request may still hold the lock, and a retry would charge again",
			config.FormatDuration(lifetime)))
	}
	return lock
}
