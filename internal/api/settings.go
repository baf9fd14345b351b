package api

import (
	"fmt"
	"strconv"

	"github.com/rocketrides/rocketrides/internal/platform/config"
)

// Variables are the api's own, beside serve's HOST and PORT.
var Variables = config.Declare(
	config.Setting{Name: "DEBUG_ADDR", Type: config.TypeAddress,
		Help: "serve pprof on this host:port, such as 127.0.0.1:6060, apart from the public port; unset serves none"},
	config.Setting{Name: "GOGC", Type: config.TypeString,
		Help: "Go's garbage-collection target, a percentage: the heap grows by this share of what is live before the next collection; higher spends memory to save CPU; off collects only as GOMEMLIMIT (Go's own, which caps the heap whatever this says) requires"},
)

// GCPercent reads GOGC as Go does: a positive percentage, or off (-1).
func GCPercent(value string) (int, error) {
	if value == "off" {
		return -1, nil
	}
	n, err := strconv.Atoi(value)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("GOGC=%q: must be a positive percentage, or off", value)
	}
	return n, nil
}

// DefaultGCPercent is the api's GOGC unless set. Go's default, 100,
// collects a heap as small as the api's (a few MiB live) so often that
// collecting was a tenth of its CPU per ride; at 400 the bench measured
// about a tenth less CPU per new ride and a peak RSS of about 54 MiB
// instead of 35 (docs/scaling.md).
const DefaultGCPercent = "400"
