package localpg

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables are the local cluster's.
var Variables = config.Declare(
	config.Setting{Name: "LOCALPG_PORT", Type: config.TypeInt,
		Help: "the port of the project-local Postgres cluster; the replicated pair takes the two ports above it, the pooler the third, the bench's cluster the tenth; two checkouts on one machine each need their own"},
)
