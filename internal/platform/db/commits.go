package db

import (
	"context"
	"errors"
	"fmt"
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
// zero), and the error otherwise. Only a primary with synchronous standbys
// named is probed, with one commit of one WAL record and no table; every
// other database answers from one read.
func CheckCommits(ctx context.Context, pool *pgxpool.Pool, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = CommitProbeTimeout
	}
	var standbys, syncCommit string
	err := pool.QueryRow(ctx, `SELECT current_setting('synchronous_standby_names'), current_setting('synchronous_commit')`).
		Scan(&standbys, &syncCommit)
	if err != nil {
		return fmt.Errorf("read the commit settings: %w", err)
	}
	if standbys == "" || syncCommit == "off" || syncCommit == "local" {
		return nil // no commit of ours waits for a standby
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
		return &CommitsWaitError{Standbys: standbys, Waited: time.Since(start).Round(time.Millisecond)}
	}
	if err != nil {
		return fmt.Errorf("probe a commit: %w", err)
	}
	return nil
}
