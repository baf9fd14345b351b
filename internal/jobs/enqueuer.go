// First reading: the enqueuer, the article's staged job drainer. In one
// transaction it deletes a batch of staged jobs and inserts them into
// River, so that each job reaches the queue exactly once.
//
// Left to a second reading: the Enqueuer, its config and defaults
// (enqueuerconfig.go); how a batch goes into River, unique jobs and all
// (insert.go); RunOnce and Run, which wakes on the staging transaction's
// NOTIFY (run.go, listen.go); staged jobs of a kind no worker handles
// (waiting.go).

package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
)

// stagedJob is a row of staged_jobs.
type stagedJob struct {
	ID      int64           `db:"id"`
	JobName string          `db:"job_name"`
	JobArgs json.RawMessage `db:"job_args"`
	Trace   *string         `db:"traceparent"` // the staging request's (trace.go)
}

// moveBatch deletes a batch of staged jobs and inserts them into River in
// one transaction, so the handoff is exactly once: a crash between the
// two loses nothing (the delete rolls back with the insert), and
// enqueuers running side by side never move a job twice (rows one has
// locked are skipped by the others).
func (e *Enqueuer) moveBatch(ctx context.Context) (int, error) {
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin enqueuer batch: %w", err)
	}
	defer func() {
		// After a successful commit this is a no-op.
		if err := tx.Rollback(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
			e.logger.ErrorContext(ctx, "Roll back enqueuer batch", slog.Any("error", err))
		}
	}()

	// SKIP LOCKED lets enqueuers share the table: each takes rows no
	// other transaction holds, and a row deleted by a committed batch is
	// gone for everyone. The ORDER BY keeps the handoff roughly first
	// staged, first queued.
	rows, err := tx.Query(ctx, `
		WITH moved AS (
			DELETE FROM staged_jobs
			WHERE id IN (
				SELECT id
				FROM staged_jobs
				WHERE job_name = ANY($2)
				ORDER BY id
				LIMIT $1
				FOR UPDATE SKIP LOCKED
			)
			RETURNING id, job_name, job_args, traceparent
		)
		SELECT id, job_name, job_args, traceparent FROM moved ORDER BY id`,
		e.batchSize, e.kinds,
	)
	if err != nil {
		return 0, fmt.Errorf("take staged jobs: %w", err)
	}
	staged, err := pgx.CollectRows(rows, pgx.RowToStructByName[stagedJob])
	if err != nil {
		return 0, fmt.Errorf("take staged jobs: %w", err)
	}
	if len(staged) == 0 {
		return 0, nil
	}

	params, batchDuplicates := e.insertParams(staged)
	results, err := e.river.InsertManyTx(ctx, tx, params)
	if err != nil {
		return 0, fmt.Errorf("insert %d staged jobs (ids %d..%d) into river: %w",
			len(staged), staged[0].ID, staged[len(staged)-1].ID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit enqueuer batch of %d: %w", len(staged), err)
	}
	e.logMoved(ctx, staged, batchDuplicates, results)
	return len(staged), nil
}
