// Second reading: how an atomic phase (phase.go) goes to Postgres. A
// phase's statements are queued on its Tx and sent together, BEGIN to
// COMMIT, in one round trip unless the phase needs an answer on the way;
// PhaseThen sends two phases that no foreign call separates in one
// pipeline, each its own transaction; a phase that Postgres aborts for a
// serialization failure or deadlock runs again. (A guard sent ahead of a
// phase, in its round trip, is guard.go's.) A phase function reads the
// same whichever way it is sent.

package idem

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rocketrides/rocketrides/internal/platform/db"
)

// ErrContention means Postgres kept aborting a phase because of
// concurrent transactions.
var ErrContention = errors.New("database contention")

// Tx is the transaction of one atomic phase, pipelined. Statements are
// queued and go to Postgres together, in order, when the phase needs an
// answer (Flush) and at commit, so a phase costs as few round trips as its
// data dependencies allow: one for each phase of a ride (BEGIN, the new
// recovery point, which is the fence, the writes and COMMIT), where a
// statement-at-a-time transaction costs four or five. Each statement's
// result reaches the callback set on its QueuedQuery; the first error
// aborts the phase and rolls it back.
type Tx struct {
	conn  *pgx.Conn
	batch *pgx.Batch
	// after is sent behind the last COMMIT (QueueAfterCommit).
	after []afterCommit

	// The phase being queued: its store, key and starting recovery point,
	// whether its fence is yet to go out (fence.go), its move once said
	// (Move), and the first bug its function made.
	store        *Store
	key          *Key
	from         RecoveryPoint
	fencePending bool
	moved        *queuedPhase
	err          error
}

type afterCommit struct {
	sql  string
	args []any
}

// Queue adds a statement to the phase, to be sent with the next Flush or
// with the COMMIT.
func (tx *Tx) Queue(sql string, args ...any) *pgx.QueuedQuery {
	tx.lockFirst() // the phase's first statement is not its move
	return tx.batch.Queue(sql, args...)
}

// fail records err, a bug in the phase function's use of tx, which fails
// the phase.
func (tx *Tx) fail(err error) {
	if tx.err == nil {
		tx.err = err
	}
}

// QueueAfterCommit adds a statement sent behind the phase's COMMIT, in the
// same round trip, in a transaction of its own: for a signal that should
// follow the phase's commit rather than share it (jobs.wake says why). It
// runs only if the phase committed, since a pipeline stops at its first
// error; and its own failure does not fail the phase, which has committed:
// it is logged (Config.Logger).
func (tx *Tx) QueueAfterCommit(sql string, args ...any) {
	tx.after = append(tx.after, afterCommit{sql, args})
}

// flushCommitted sends the queued statements, the phase's COMMIT the last
// of them, and behind it what QueueAfterCommit queued.
func (tx *Tx) flushCommitted(ctx context.Context) error {
	for _, a := range tx.after {
		tx.batch.Queue(a.sql, a.args...)
	}
	tx.after = nil
	return tx.Flush(ctx)
}

// Flush sends the queued statements in one round trip and hands each
// result to its callback. It returns the first error.
func (tx *Tx) Flush(ctx context.Context) error {
	tx.lockFirst() // what goes out now must go out fenced
	if tx.err != nil {
		return tx.err
	}
	b := tx.batch
	tx.batch = &pgx.Batch{}
	return tx.conn.SendBatch(ctx, b).Close()
}

// Next is the recovery point the phase's move (Move) takes the key to;
// empty before the phase says it, or when it sets the key aside or
// reopens it, which keeps its recovery point. For machinery that wraps a
// phase function, such as an endpoint's test seams.
func (tx *Tx) Next() RecoveryPoint {
	if tx.moved == nil || !tx.moved.advances {
		return ""
	}
	return tx.moved.next
}

// retryPhase runs fn from attempt on; err is the previous attempt's.
func (s *Store) retryPhase(ctx context.Context, key *Key, fn PhaseFunc, attempt int, err error) error {
	for ; attempt <= s.phaseAttempts; attempt++ {
		err = s.phaseOnce(ctx, key, nil, fn)
		if errors.Is(err, errReapedPredecessor) {
			return s.retire(ctx, key)
		}
		if err == nil || !db.IsRetryable(err) {
			return err
		}
	}
	return fmt.Errorf("phase at %s for key %d gave up after %d attempts: %w: %w",
		key.RecoveryPoint, key.ID, s.phaseAttempts, ErrContention, err)
}

// phaseOnce makes one attempt at the atomic phase fn of key: its
// statements, BEGIN to COMMIT, go out in one round trip unless fn flushes
// on the way, and the in-memory key follows once COMMIT has answered. A
// guard, when not nil, goes out ahead of them (guard.go).
func (s *Store) phaseOnce(ctx context.Context, key *Key, guard *Guard, fn PhaseFunc) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("phase at %s for key %d: %w", key.RecoveryPoint, key.ID, err)
	}
	// A connection given back inside a transaction is closed by the pool,
	// which rolls the transaction back; rollback spares the reconnect.
	defer conn.Release()
	defer rollback(ctx, conn.Conn()) // a no-op once committed

	tx := &Tx{conn: conn.Conn(), batch: &pgx.Batch{}}
	if guard != nil {
		tx.queueGuard(guard)
	}
	q, err := s.queuePhase(ctx, tx, key, key.RecoveryPoint, fn)
	if err != nil {
		return s.fenceError(key, err)
	}
	// Once COMMIT has answered, an error can only be a statement queued
	// behind it.
	if err := tx.flushCommitted(ctx); err != nil {
		if !q.committed {
			return s.fenceError(key, fmt.Errorf("phase at %s for key %d: %w", key.RecoveryPoint, key.ID, err))
		}
		s.behindCommitFailed(ctx, key, err)
	}
	q.settle(ctx)
	return nil
}

// behindCommitFailed logs err, the failure of a statement sent behind a
// phase's COMMIT (QueueAfterCommit). The phase committed and stands; what
// the statement was for is left to its fallback (for the enqueuer's wake,
// its poll).
func (s *Store) behindCommitFailed(ctx context.Context, key *Key, err error) {
	s.logger.WarnContext(ctx, "A statement sent behind a committed phase failed; the phase stands",
		slog.Int64("idempotency_key_id", key.ID), slog.Any("error", err))
}

// PhaseThen runs first and then second as two atomic phases of key, each
// in its own transaction with its own COMMIT, both sent to Postgres in one
// pipeline: no foreign state mutation separates them, so the second need
// not wait for the first's answer. Every recovery point is still committed
// on its own. Should the second fail, the first stays committed and the
// key at the recovery point it reached, which is where a retry resumes.
// (A pipeline stops at its first error, so a first that fails sends no
// second.) If first finishes the key, sets it aside or reopens it, second
// does not run.
//
// A phase Postgres aborts for a concurrent transaction is run again as
// Phase runs it, one phase at a time; the pipelined try counts as its
// first attempt.
func (s *Store) PhaseThen(ctx context.Context, key *Key, first, second PhaseFunc) error {
	start, from := time.Now(), key.RecoveryPoint
	q, q2, err := s.phasesOnce(ctx, key, first, second)
	switch {
	case q == nil || !q.committed:
		if errors.Is(err, errReapedPredecessor) {
			return s.retire(ctx, key)
		}
		if !db.IsRetryable(err) {
			return err
		}
		err = s.retryPhase(ctx, key, first, 2, err)
		s.metrics.PhaseDone(string(from), start)
		if err != nil {
			return err
		}
		if key.LockToken == nil || key.AttentionReason != nil {
			return nil // finished, set aside or reopened: nothing follows
		}
		return s.Phase(ctx, key, second)
	case err != nil && db.IsRetryable(err):
		s.metrics.PhaseDone(string(from), start)
		defer s.metrics.PhaseDone(string(key.RecoveryPoint), start)
		return s.retryPhase(ctx, key, second, 2, err)
	case err != nil:
		s.metrics.PhaseDone(string(from), start)
		return err
	}
	s.metrics.PhaseDone(string(from), start)
	if q2 != nil {
		s.metrics.PhaseDone(string(q.next), start)
	}
	return nil
}

// phasesOnce sends first and second in one pipeline (see PhaseThen). It
// returns the phases it queued, nil for one it did not, with the error of
// whichever failed.
func (s *Store) phasesOnce(ctx context.Context, key *Key, first, second PhaseFunc) (q1, q2 *queuedPhase, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("phase at %s for key %d: %w", key.RecoveryPoint, key.ID, err)
	}
	defer conn.Release()
	defer rollback(ctx, conn.Conn()) // a no-op once committed

	tx := &Tx{conn: conn.Conn(), batch: &pgx.Batch{}}
	q1, err = s.queuePhase(ctx, tx, key, key.RecoveryPoint, first)
	if err != nil {
		return nil, nil, s.fenceError(key, err)
	}
	var stopped error // second's own, before it was sent
	if q1.locked {
		// The second's BEGIN follows the first's COMMIT: every transaction
		// in the pipeline is explicit, since a statement sent before a
		// BEGIN in the same implicit block would be folded into the
		// BEGIN's transaction.
		q2, stopped = s.queuePhase(ctx, tx, key, q1.next, second)
	}
	// A second whose own code failed may have queued part of its
	// transaction; it goes out without its COMMIT and is rolled back.
	err = tx.flushCommitted(ctx)
	if stopped == nil && cmp.Or(q2, q1).committed && err != nil {
		s.behindCommitFailed(ctx, key, err) // the last phase committed: the error was behind it
		err = nil
	}
	if !q1.committed {
		return q1, nil, s.fenceError(key, fmt.Errorf("phase at %s for key %d: %w", key.RecoveryPoint, key.ID, cmp.Or(err, stopped)))
	}
	q1.settle(ctx)
	switch {
	case stopped != nil:
		return q1, nil, s.fenceError(key, stopped)
	case err != nil:
		return q1, nil, s.fenceError(key, fmt.Errorf("phase at %s for key %d: %w", key.RecoveryPoint, key.ID, err))
	case q2 != nil:
		q2.settle(ctx)
	}
	return q1, q2, nil
}

// queuedPhase is an atomic phase queued on a Tx, COMMIT included.
type queuedPhase struct {
	// next is the recovery point the phase moves the key to; locked says
	// whether this request still holds the key after it (an intermediate
	// recovery point, not finished, not set aside or reopened).
	next   RecoveryPoint
	locked bool
	// advances says the phase moves the key to next, rather than setting
	// it aside or reopening it.
	advances bool
	// committed is set when COMMIT has answered COMMIT.
	committed bool
	// settle makes the in-memory key follow; only once committed.
	settle func(ctx context.Context)
}

// queueCommit queues COMMIT. committed, if not nil, is set once Postgres
// has answered COMMIT; a transaction that Postgres ends with ROLLBACK
// instead (it failed earlier) is pgx.ErrTxCommitRollback.
func (tx *Tx) queueCommit(committed *bool) {
	tx.batch.Queue(`COMMIT`).Exec(func(tag pgconn.CommandTag) error {
		if tag.String() != "COMMIT" {
			return pgx.ErrTxCommitRollback
		}
		if committed != nil {
			*committed = true
		}
		return nil
	})
}

// commit queues COMMIT and sends what is queued.
func (tx *Tx) commit(ctx context.Context) error {
	tx.queueCommit(nil)
	return tx.Flush(ctx)
}

// inTx runs fn's queued statements in one transaction, pipelined as a
// phase's are, but unfenced: for work on many keys at once (Reap).
func (s *Store) inTx(ctx context.Context, fn func(tx *Tx) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	defer rollback(ctx, conn.Conn()) // a no-op once committed

	tx := &Tx{conn: conn.Conn(), batch: &pgx.Batch{}}
	tx.batch.Queue(`BEGIN`)
	if err := fn(tx); err != nil {
		return err
	}
	return tx.commit(ctx)
}

// rollback ends a phase's transaction after a failure. It runs even if
// ctx was cancelled. Should it fail, the connection is closed, which ends
// the transaction just as well.
func rollback(ctx context.Context, conn *pgx.Conn) {
	if conn.IsClosed() || conn.PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, `ROLLBACK`); err != nil {
		_ = conn.Close(ctx)
	}
}
