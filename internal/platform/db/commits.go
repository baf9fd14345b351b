package db

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// CommitProbeTimeout bounds CheckCommits's probe commit: a synchronous
// standby on loopback or in the same zone confirms in milliseconds, so a
// commit that waits a second is waiting for one that is not there.
const CommitProbeTimeout = time.Second

// CommitsWaitError says the primary holds every commit until a
// synchronous standby confirms it, and none does. This is the trade-off
// synchronous replication makes on purpose (docs/failures.md, "A
// synchronous primary without its standby"): an acknowledged commit is on
// two machines or it is not acknowledged at all.
type CommitsWaitError struct {
	// Standbys is the primary's synchronous_standby_names.
	Standbys string
	// Waited is how long the probe commit waited.
	Waited time.Duration
}

func (e *CommitsWaitError) Error() string {
	return fmt.Sprintf("commits wait for a synchronous standby (synchronous_standby_names = %q) that has not confirmed one in %s: "+
		"bring a standby back, or empty synchronous_standby_names to accept losing what a failover would lose", e.Standbys, e.Waited)
}

// CheckCommits reports whether a commit on pool returns: nil when it
// does, a *CommitsWaitError when the primary holds it for a synchronous
// standby that does not confirm it within timeout (CommitProbeTimeout when
// zero), and the error otherwise. It is CheckDurability without the
// answer to who confirmed the commit.
func CheckCommits(ctx context.Context, pool *pgxpool.Pool, timeout time.Duration) error {
	_, err := CheckDurability(ctx, pool, timeout)
	return err
}

// Durability is who confirms a commit before the primary acknowledges it.
// A commit a synchronous standby confirmed survives a failover to that
// standby; one the primary alone confirmed is lost with the primary if it
// had not reached a standby yet. The second is a single-node cluster's
// normal state, and a replicated one's while its standby is gone and its
// HA manager (Patroni in non-strict synchronous mode) has emptied
// synchronous_standby_names to keep taking writes (docs/failures.md).
type Durability struct {
	// StandbyConfirms: the primary names synchronous standbys, our
	// sessions' commits wait for them, and a probe commit came back, so
	// a standby confirmed it.
	StandbyConfirms bool
	// Synchronous are the application names of the standbys
	// pg_stat_replication shows as sync or quorum. Empty when the role
	// may not read them (it needs pg_read_all_stats).
	Synchronous []string
	// Streaming counts the standbys connected to the primary, synchronous
	// or not.
	Streaming int
	// SynchronousStandbyNames and SynchronousCommit are the primary's
	// settings, as our sessions see them.
	SynchronousStandbyNames, SynchronousCommit string
}

// String says who confirms commits, plainly: a single-node development
// cluster and a replicated one without its standby are in the same state,
// and only the second is unusual.
func (d Durability) String() string {
	switch {
	case d.StandbyConfirms && len(d.Synchronous) > 0:
		return "confirmed by the primary and a synchronous standby (" + strings.Join(d.Synchronous, ", ") + ")"
	case d.StandbyConfirms:
		return "confirmed by the primary and a synchronous standby"
	case d.SynchronousStandbyNames != "":
		return "confirmed by the primary alone (synchronous_commit = " + d.SynchronousCommit + ")"
	case d.Streaming == 1:
		return "confirmed by the primary alone (one standby streams, not synchronously)"
	case d.Streaming > 1:
		return fmt.Sprintf("confirmed by the primary alone (%d standbys stream, none synchronously)", d.Streaming)
	default:
		return "confirmed by the primary alone (no standby)"
	}
}

// CheckDurability reports who confirms a commit on pool, and whether one
// returns at all: a *CommitsWaitError when the primary holds commits for
// a synchronous standby that does not confirm a probe commit within
// timeout (CommitProbeTimeout when zero), another error when the database
// does not answer. Only a primary with synchronous standbys named is
// probed, with one commit of one WAL record and no table; every other
// database answers from one read, which serves as the ping.
func CheckDurability(ctx context.Context, pool *pgxpool.Pool, timeout time.Duration) (Durability, error) {
	if timeout <= 0 {
		timeout = CommitProbeTimeout
	}
	var d Durability
	// pg_stat_replication has a row per connected standby for any role;
	// its details, sync_state and application_name among them, only
	// for pg_read_all_stats.
	err := pool.QueryRow(ctx, `
		SELECT current_setting('synchronous_standby_names'), current_setting('synchronous_commit'),
		       (SELECT count(*) FROM pg_stat_replication),
		       (SELECT coalesce(array_agg(application_name ORDER BY application_name), '{}')
		        FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum'))`).
		Scan(&d.SynchronousStandbyNames, &d.SynchronousCommit, &d.Streaming, &d.Synchronous)
	if err != nil {
		return Durability{}, fmt.Errorf("read the commit settings: %w", err)
	}
	if d.SynchronousStandbyNames == "" || d.SynchronousCommit == "off" || d.SynchronousCommit == "local" {
		return d, nil // no commit of ours waits for a standby
	}
	probeCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	// One statement is one implicit transaction, whose commit is what
	// waits. Only a transaction that wrote WAL waits for a standby, and a
	// transactional logical message is the smallest write there is: a WAL
	// record that touches no table and that nothing decodes.
	_, err = pool.Exec(probeCtx, `SELECT pg_logical_emit_message(true, 'rocketrides.readyz', '')`)
	if err != nil && errors.Is(probeCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		return d, &CommitsWaitError{Standbys: d.SynchronousStandbyNames, Waited: time.Since(start).Round(time.Millisecond)}
	}
	if err != nil {
		return d, fmt.Errorf("probe a commit: %w", err)
	}
	d.StandbyConfirms = true
	return d, nil
}
