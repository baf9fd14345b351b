package reconcile

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables are the reconciler's.
var Variables = config.Declare(
	config.Setting{Name: "RECONCILER_WINDOW", Type: config.TypeDuration,
		Help: "how far back each reconciliation compares Stripe's charges with rides (-since overrides it)"},
	config.Setting{Name: "RECONCILER_INTERVAL", Type: config.TypeDuration,
		Help: "how often the reconciler runs"},
	config.Setting{Name: "RECONCILER_GRACE", Type: config.TypeDuration,
		Help: "how old a charge or ride must be to be compared, so that requests in flight are not reported"},
)
