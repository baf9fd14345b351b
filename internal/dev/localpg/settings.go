package localpg

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables are the local cluster's.
var Variables = config.Declare(
	config.Setting{Name: "LOCALPG_PORT", Type: config.TypeInt,
		Help: "the port of the project-local Postgres cluster; the pooler takes the third port above it, the replicated cluster (etcd and Patroni) the fourth to the ninth, the bench's cluster the tenth, the tests' and drills' scratch replicated clusters the 11th to the 40th; two checkouts on one machine each need their own"},
)
