package receipt

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables are the worker's, which works receipt jobs.
var Variables = config.Declare(
	config.Setting{Name: "WORKER_SHUTDOWN_TIMEOUT", Type: config.TypeDuration,
		Help: "how long a stopping worker lets the receipts in progress finish before it cancels them (a cancelled one is retried later, never sent twice)"},
	config.Setting{Name: "WORKER_ONCE_TIMEOUT", Type: config.TypeDuration,
		Help: "how long -once may take, so that a hanging mail server cannot hold up a script"},
	config.Setting{Name: "RECEIPT_FROM", Type: config.TypeString,
		Help: "the From address of receipts"},
)
