package api

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables are the api's own, beside serve's HOST and PORT.
var Variables = config.Declare(
	config.Setting{Name: "DEBUG_ADDR", Type: config.TypeAddress,
		Help: "serve pprof on this host:port, such as 127.0.0.1:6060, apart from the public port; unset serves none"},
)
