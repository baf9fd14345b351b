package reaper

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables are the reaper's.
var Variables = config.Declare(
	config.Setting{Name: "REAPER_MAX_AGE", Type: config.TypeDuration,
		Help:     "a key's lifetime: past it the key is deleted (an unfinished one copied to abandoned_requests first) and a retry with it no longer replays",
		Trades:   "shorter keeps the key table small, but a client retrying later than this gets 410 idempotency_key_expired instead of its answer (the lifetime docs/openapi.yaml publishes); it must exceed IDEMPOTENCY_LOCK_TIMEOUT",
		Failures: "Residual risks, and who notices (keys older than the reaper's horizon)"},
	config.Setting{Name: "REAPED_KEY_RETENTION", Type: config.TypeDuration,
		Help:     "how long after a key's first use the record of its deletion refuses its late retries (410); only then may the key's value start a new request",
		Trades:   "shorter frees reaped_keys sooner, but a client retrying after it starts a new request, and a new charge, under the old key; it must exceed REAPER_MAX_AGE",
		Failures: "Residual risks, and who notices (keys older than the reaper's horizon)"},
	config.Setting{Name: "REAPER_BATCH_SIZE", Type: config.TypeInt, Unit: "keys",
		Help: "keys deleted per statement"},
	config.Setting{Name: "REAPER_POLL_INTERVAL", Type: config.TypeDuration,
		Help: "how often the reaper looks for keys past their lifetime when the last look found none"},
	config.Setting{Name: "REAPER_DUTY_CYCLE", Type: config.TypeFraction,
		Help: "the share of time spent deleting while a backlog drains, so that it does not crowd out the api (1: no rest between batches)"},
)
