package completer

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables are the completer's.
var Variables = config.Declare(
	config.Setting{Name: "COMPLETER_MIN_AGE", Type: config.TypeDuration,
		Help:     "how long a request must have gone unworked before the completer takes it over from its client",
		Trades:   "with COMPLETER_RETRY_INTERVAL, the time within which a request its client gave up on is settled (the promise in docs/openapi.yaml: 6 minutes on the defaults): shorter settles sooner but races clients still retrying; a key whose request still holds its lock is left alone until IDEMPOTENCY_LOCK_TIMEOUT has passed, however short this is",
		Failures: "The article's \"Murphy's law\" list (a bad deploy fails every request half way)"},
	config.Setting{Name: "COMPLETER_RETRY_INTERVAL", Type: config.TypeDuration,
		Help:     "how long the completer waits before trying a request again after a failed attempt",
		Trades:   "part of the settling promise, with COMPLETER_MIN_AGE: longer delays requests whose Stripe call failed; shorter calls a failing Stripe more often",
		Failures: "Further cases the article does not list (the client gives up after a 5xx)"},
	config.Setting{Name: "COMPLETER_POLL_INTERVAL", Type: config.TypeDuration,
		Help: "how often the completer looks for abandoned requests when the last look found none"},
	config.Setting{Name: "COMPLETER_BATCH_SIZE", Type: config.TypeInt, Unit: "keys",
		Help: "abandoned requests claimed per batch"},
	config.Setting{Name: "COMPLETER_CONCURRENCY", Type: config.TypeInt, Unit: "keys",
		Help: "requests of a batch worked at once (each mostly waits on Stripe)"},
)
