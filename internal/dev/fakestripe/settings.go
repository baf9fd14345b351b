package fakestripe

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables are the fake's own, beside serve's HOST and PORT.
var Variables = config.Declare(
	config.Setting{Name: "FAKESTRIPE_KEY_RETENTION", Type: config.TypeDuration,
		Help: "how long the fake remembers an idempotency key, as Stripe does for 24h"},
	config.Setting{Name: "FAKESTRIPE_STATE", Type: config.TypeString,
		Help: "a file that keeps the fake's customers, charges and idempotency keys across restarts (make dev: .data/fakestripe/state.jsonl, reset by make clean); unset keeps them in memory only"},
)
