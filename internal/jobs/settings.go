package jobs

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables are the enqueuer's (ENQUEUER_*) and the worker's, which works
// receipt jobs (WORKER_*, RECEIPT_FROM).
var Variables = config.Declare(
	config.Setting{Name: "ENQUEUER_POLL_INTERVAL", Type: config.TypeDuration,
		Help: "how often the enqueuer looks for staged jobs without being woken; a NOTIFY sent once the staging phase commits wakes it sooner"},
	config.Setting{Name: "ENQUEUER_BATCH_SIZE", Type: config.TypeInt, Unit: "jobs",
		Help: "staged jobs moved into River per transaction"},

	config.Setting{Name: "WORKER_SHUTDOWN_TIMEOUT", Type: config.TypeDuration,
		Help: "how long a stopping worker lets the receipts in progress finish before it cancels them (a cancelled one is retried later, never sent twice)"},
	config.Setting{Name: "WORKER_ONCE_TIMEOUT", Type: config.TypeDuration,
		Help: "how long -once may take, so that a hanging mail server cannot hold up a script"},
	config.Setting{Name: "WORKER_JOB_TIMEOUT", Type: config.TypeDuration,
		Help: "how long one attempt at sending a receipt may take before River cancels it and retries later"},
	config.Setting{Name: "WORKER_RESCUE_STUCK_AFTER", Type: config.TypeDuration,
		Help:     "how long a receipt job may stay running before River takes it back for another attempt (a worker that lost the database mid-job leaves its jobs running); must exceed WORKER_JOB_TIMEOUT",
		Trades:   "shorter sends a receipt sooner after a worker died mid-job; never shorter than one attempt can take, or a slow receipt is sent twice",
		Failures: "Failover: a primary, a standby, and what each replication mode loses"},
	config.Setting{Name: "RECEIPT_FROM", Type: config.TypeString,
		Help: "the From address of receipts"},
)
