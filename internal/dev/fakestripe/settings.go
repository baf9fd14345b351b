package fakestripe

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables are the fake's own, beside serve's HOST and PORT.
var Variables = config.Declare(
	config.Setting{Name: "FAKESTRIPE_KEY_RETENTION", Type: config.TypeDuration,
		Help: "how long the fake remembers an idempotency key, as Stripe does for 24h"},
)
