package serve

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables are those of a process's public HTTP listener (the api, the
// Stripe fake).
var Variables = config.Declare(
	config.Setting{Name: "HOST", Type: config.TypeHost,
		Help: "the address to listen on: loopback unless told otherwise; 0.0.0.0 serves other machines (docker-compose.yml sets it in its containers)"},
	config.Setting{Name: "PORT", Type: config.TypePort, Zero: "any free port, logged once listening",
		Help: "the port to listen on"},
)
