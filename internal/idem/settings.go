package idem

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables are the key store's: the processes that take keys' locks (the
// api, the completer) and the reaper, which leaves locked keys alone,
// must agree on them.
var Variables = config.Declare(
	config.Setting{Name: "IDEMPOTENCY_LOCK_TIMEOUT", Type: config.TypeDuration,
		Help:     "how long a request's lock on its idempotency key protects it; after that a retry, or the completer, may take the key over",
		Trades:   "shorter: a crashed request's key is taken over sooner, but a request that is merely slow loses its key more often (fenced, so never a second charge, but it fails with lock_lost); longer: a retry after a crash waits longer (409 request_in_progress). Must stay below REAPER_MAX_AGE and be the same for the api, the completer and the reaper. It need not stay below COMPLETER_MIN_AGE: the completer claims a key as a retry does and leaves a live lock alone, so a request that crashed holding its lock is completed once both have passed",
		Failures: "Further cases the article does not list (a request stalls past the lock timeout)"},
)
