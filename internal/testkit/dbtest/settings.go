package dbtest

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables are the test suite's.
var Variables = config.Declare(
	config.Setting{Name: "TEST_DATABASE_URL", Type: config.TypeConnString,
		Help: "tests only: a Postgres server (a postgres:// URL) to create the per-test databases on instead of the project-local cluster"},
)
