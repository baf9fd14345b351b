package staged

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables are the enqueuer's.
var Variables = config.Declare(
	config.Setting{Name: "ENQUEUER_POLL_INTERVAL", Type: config.TypeDuration,
		Help: "how often the enqueuer looks for staged jobs without being woken; a NOTIFY from the staging transaction wakes it sooner"},
	config.Setting{Name: "ENQUEUER_BATCH_SIZE", Type: config.TypeInt, Unit: "jobs",
		Help: "staged jobs moved into River per transaction"},
)
