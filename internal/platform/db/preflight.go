package db

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// AllowAsyncReplicationSetting is the environment variable that lets a
// process start against a primary with asynchronous standbys.
const AllowAsyncReplicationSetting = "DATABASE_ALLOW_ASYNC_REPLICATION"

// PreflightConfig configures Preflight.
type PreflightConfig struct {
	// AllowAsyncReplication accepts a primary that streams to an
	// asynchronous standby, or commits our sessions asynchronously. A
	// failover to such a standby loses the rides whose 201 the clients
	// already have, and their charges stay at Stripe.
	AllowAsyncReplication bool
}

// Preflight checks, once at start, that the database behind pool keeps
// the promises the idempotency keys rest on, and refuses it with an error
// naming the setting to change otherwise:
//
//   - A transaction is one session from BEGIN to COMMIT. A pooler in
//     statement mode refuses BEGIN or splits the transaction, and every
//     atomic phase would be torn.
//   - pgx's default exec mode prepares named statements on a connection
//     and reuses them on the next query; behind a pooler in transaction
//     mode the next query may run on another server connection, where
//     the statement does not exist. Transaction pooling is recognised by
//     two of our connections sharing one server backend.
//   - Unless AllowAsyncReplication, a primary with standbys must make our
//     commits wait for a synchronous one: synchronous_standby_names set,
//     synchronous_commit on (or remote_write, remote_apply). Standbys
//     beyond the synchronous ones may be asynchronous, as the third node
//     of a Patroni cluster is: a failover must promote a synchronous
//     standby, which Patroni's synchronous mode does and a failover by
//     hand must too (docs/failures.md).
//
// The probes run in the simple protocol on connections of their own, so
// they work whatever the configuration they check.
func Preflight(ctx context.Context, pool *pgxpool.Pool, cfg PreflightConfig) error {
	// A process started while its database restarts or fails over waits
	// for it, as its pool would; a refusal is final at once.
	deadline := time.Now().Add(preflightConnectTimeout)
	var firstAsync time.Time
	for {
		err := preflight(ctx, pool.Config().ConnConfig, cfg)
		var refusal *refusalError
		if errors.As(err, &refusal) && refusal.transient {
			// A standby that has just connected, or reconnected after
			// an outage, streams asynchronously until the HA manager
			// names it in synchronous_standby_names (Patroni on its next
			// loop, and a synchronous-mode cluster that lost its only
			// standby emptied the setting meanwhile so that writes go
			// on): refuse only what lasts.
			if firstAsync.IsZero() {
				firstAsync = time.Now()
			}
			if time.Since(firstAsync) < asyncSettleTime {
				refusal = nil
			}
		}
		if err == nil || refusal != nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// refusalError is a configuration Preflight refuses, as opposed to a
// database it could not reach.
type refusalError struct {
	msg string
	// transient: the state may change by itself within asyncSettleTime.
	transient bool
}

// asyncSettleTime is how long a primary may stream to standbys with an
// empty synchronous_standby_names before Preflight believes it is set up
// asynchronously: longer than Patroni's loop_wait (10 s by default), the
// longest it takes to name a standby that has come back.
const asyncSettleTime = 20 * time.Second

func (e *refusalError) Error() string { return e.msg }

func refuse(format string, args ...any) error {
	return &refusalError{msg: fmt.Sprintf(format, args...)}
}

func preflight(ctx context.Context, connConfig *pgx.ConnConfig, cfg PreflightConfig) error {
	first, err := pgx.ConnectConfig(ctx, connConfig.Copy())
	if err != nil {
		return fmt.Errorf("preflight: connect: %w", err)
	}
	defer first.Close(context.WithoutCancel(ctx))
	second, err := pgx.ConnectConfig(ctx, connConfig.Copy())
	if err != nil {
		return fmt.Errorf("preflight: connect: %w", err)
	}
	defer second.Close(context.WithoutCancel(ctx))

	if err := checkTransactions(ctx, first); err != nil {
		return err
	}
	pooled, err := sharesBackends(ctx, first, second)
	if err != nil {
		return err
	}
	if pooled && connConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
		return refuse("DATABASE_URL: the database is behind a pooler in transaction mode (two connections share one " +
			"server backend), which loses the named prepared statements of pgx's default exec mode: add " +
			"default_query_exec_mode=cache_describe to DATABASE_URL, or connect directly")
	}
	if cfg.AllowAsyncReplication {
		return nil
	}
	return checkReplication(ctx, first)
}

// preflightConnectTimeout bounds the wait for the database at start.
const preflightConnectTimeout = 30 * time.Second

// checkTransactions runs a two-statement transaction and checks that the
// second statement sees what the first did within it.
func checkTransactions(ctx context.Context, conn *pgx.Conn) error {
	const refused = "DATABASE_URL: the database cannot run a transaction of two statements on one session " +
		"(is it a pooler in statement mode? use pool_mode = transaction or session)"
	// PgBouncer in statement mode says so in its error; anything else
	// (a server restarting behind the pooler) is worth another try.
	failed := func(err error) error {
		if strings.Contains(err.Error(), "statement pooling mode") {
			return refuse("%s: %v", refused, err)
		}
		return fmt.Errorf("preflight: run a transaction: %w", err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return failed(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SELECT set_config('rocketrides.preflight', 'same_session', true)", pgx.QueryExecModeSimpleProtocol); err != nil {
		return failed(err)
	}
	var seen string
	if err := tx.QueryRow(ctx, "SELECT current_setting('rocketrides.preflight', true)", pgx.QueryExecModeSimpleProtocol).Scan(&seen); err != nil {
		return failed(err)
	}
	if seen != "same_session" {
		return refuse("%s", refused)
	}
	if err := tx.Commit(ctx); err != nil {
		return failed(err)
	}
	return nil
}

// sharesBackends reports whether two client connections run their
// statements on the same server backend, which only a pooler does. An
// idle PgBouncer hands the server connection it used last to the next
// transaction, so a few alternating queries find it even while others
// use the pooler.
func sharesBackends(ctx context.Context, first, second *pgx.Conn) (bool, error) {
	for range 5 {
		var a, b int32
		if err := first.QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&a); err != nil {
			return false, fmt.Errorf("preflight: read backend pid: %w", err)
		}
		if err := second.QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&b); err != nil {
			return false, fmt.Errorf("preflight: read backend pid: %w", err)
		}
		if a == b {
			return true, nil
		}
	}
	return false, nil
}

// checkReplication refuses a primary whose standbys are all
// asynchronous, and sessions whose commits do not wait for a synchronous
// one.
func checkReplication(ctx context.Context, conn *pgx.Conn) error {
	var (
		standbys     int
		async        []string
		syncCommit   string
		standbyNames string
	)
	err := conn.QueryRow(ctx, `
		SELECT count(*)::int,
		       coalesce(array_agg(coalesce(application_name, '?') || ' (' || coalesce(sync_state, 'unknown') || ')')
		                FILTER (WHERE sync_state IS DISTINCT FROM 'sync'
		                          AND sync_state IS DISTINCT FROM 'quorum'
		                          AND sync_state IS DISTINCT FROM 'potential'), '{}'),
		       current_setting('synchronous_commit'),
		       current_setting('synchronous_standby_names')
		FROM pg_stat_replication`, pgx.QueryExecModeSimpleProtocol).Scan(&standbys, &async, &syncCommit, &standbyNames)
	if err != nil {
		return fmt.Errorf("preflight: read replication state: %w", err)
	}
	if standbys == 0 {
		// One Postgres, or a synchronous cluster whose standby is away:
		// nothing to fail over to, so nothing to lose by it. (/readyz
		// says when commits wait for a standby that is not there.)
		return nil
	}
	const why = "a failover to it loses rides whose 201 the clients already have, and their charges stay at Stripe"
	if strings.TrimSpace(standbyNames) == "" {
		hint := ""
		if strings.Contains(strings.Join(async, ","), "(unknown)") {
			hint = " (sync_state unknown: grant the role pg_monitor so that it can read pg_stat_replication)"
		}
		return &refusalError{transient: true, msg: fmt.Sprintf("%s: the primary streams to asynchronous standbys %s "+
			"(synchronous_standby_names = %q); %s. Make them synchronous (synchronous_standby_names, or Patroni's "+
			"synchronous_mode), or set %s=true to accept the loss%s", AllowAsyncReplicationSetting, strings.Join(async, ", "),
			standbyNames, why, AllowAsyncReplicationSetting, hint)}
	}
	if syncCommit == "off" || syncCommit == "local" {
		return refuse("%s: synchronous_commit is %s for our sessions, so a commit returns before the standby has it; %s. "+
			"Set synchronous_commit to on (or remote_write, remote_apply), or set %s=true to accept the loss",
			AllowAsyncReplicationSetting, syncCommit, why, AllowAsyncReplicationSetting)
	}
	return nil
}
