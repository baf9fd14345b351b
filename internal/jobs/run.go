// Second reading: how the enqueuer runs. RunOnce moves one batch
// (enqueuer.go) and reports it; Run moves batch after batch while there
// is work, and when idle waits for the staging transaction's NOTIFY
// (listen.go) or the next poll.

package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/rocketrides/rocketrides/internal/platform/loop"
)

// batchTimeout bounds one batch, including the one Run finishes after
// its context is cancelled, so a shutdown cannot hang on a dead
// database.
const batchTimeout = 30 * time.Second

// RunOnce moves one batch of staged jobs into River and reports how many
// it moved. Zero means there was nothing to move.
func (e *Enqueuer) RunOnce(ctx context.Context) (int, error) {
	moved, err := e.moveBatch(ctx)
	if err != nil {
		return 0, err
	}
	if e.onMoved != nil && moved > 0 {
		e.onMoved(moved)
	}
	// A short batch means the queue is drained of everything movable;
	// anything left is either locked by another enqueuer or refused.
	if moved < e.batchSize {
		e.reportUnknownKinds(ctx)
	}
	return moved, nil
}

// Run moves staged jobs into River until ctx is cancelled. A batch in
// progress when ctx is cancelled is finished, not abandoned.
//
// While there is work it moves batch after batch. When idle it waits for
// a NOTIFY on Channel, so a job reaches River right after the
// transaction that staged it commits, and polls every PollInterval in case
// a notification was missed. Database errors, including losing the
// listening connection when Postgres restarts, are logged and retried
// with backoff (package loop): the enqueuer outlives them.
//
// Run returns nil once ctx is cancelled.
func (e *Enqueuer) Run(ctx context.Context) error {
	l := &listener{pool: e.pool, logger: e.logger}
	defer l.close(ctx)

	// Listen before the first batch: a job staged between that batch and
	// the LISTEN would otherwise wait for the next poll.
	l.connect(ctx)

	lp, err := loop.New(&loop.Config{
		Work:         e.pass,
		PollInterval: e.pollInterval,
		Wait:         l.wait,
		Logger:       e.logger,
	})
	if err != nil {
		return err
	}
	return lp.Run(ctx)
}

// pass is one pass of Run's loop: one batch.
func (e *Enqueuer) pass(ctx context.Context) (more bool, err error) {
	// Detached from ctx so that a shutdown finishes the batch in hand;
	// batchTimeout keeps that bounded.
	batchCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
	defer cancel()
	moved, err := e.RunOnce(batchCtx)
	if err != nil {
		return false, fmt.Errorf("move staged jobs: %w", err)
	}
	// A full batch means more are probably waiting: go again at once.
	return moved == e.batchSize, nil
}
