package db

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables are the database's settings, read by every process that opens
// it.
var Variables = config.Declare(
	config.Setting{Name: "DATABASE_URL", Type: config.TypeConnString, Required: true,
		Help: "the Postgres database: a postgres:// URL or a key=value connection string (make dev and make test start a project-local cluster when unset)"},
	config.Setting{Name: "DATABASE_MAX_CONNS", Type: config.TypeInt, Unit: "connections", Zero: "pgx's default, max(4, CPUs)",
		Help: "the size of the api's connection pool"},
	config.Setting{Name: AllowAsyncReplicationSetting, Type: config.TypeBool,
		Help:     "start against a primary whose standbys replicate asynchronously (or whose sessions commit with synchronous_commit off or local), which is otherwise refused at start",
		Trades:   "availability for durability: an asynchronous failover loses the primary's last commits, so rides whose 2xx a client already received vanish while their charges stay at Stripe (the reconciler reports them)",
		Failures: "Failover: a primary, a standby, and what each replication mode loses"},
)
