package metrics

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables are the metrics listener's.
var Variables = config.Declare(
	config.Setting{Name: "METRICS_ADDR", Type: config.TypeAddress,
		Help: "serve Prometheus metrics at /metrics on this host:port, apart from any public port (unauthenticated: an address only operators reach); unset serves none"},
)
