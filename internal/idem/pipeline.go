// Second reading: the fast path of an atomic phase (phase.go), the
// default (Config.Plain false). A phase's statements are queued on its Tx
// and sent together, BEGIN to COMMIT, in one round trip unless the phase
// needs an answer on the way, and its move, said first, is its fence
// (fence.go); PhaseThen sends two phases that no foreign call separates in
// one pipeline, each its own transaction. (A guard sent ahead of a phase,
// in its round trip, is guard.go's.) A phase function reads the same on
// both paths, and Postgres receives its statements in the same order; the
// tests run both and hold them equal.

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

// pipeline is a Tx's on the fast path: the pipeline the phase is queued
// on, where its BEGIN is, whether its fence is yet to go out (fence.go),
// and whether its guards went out with an earlier attempt (guard.go).
type pipeline struct {
	conn         *pgx.Conn
	batch        *pgx.Batch
	begin        int
	fencePending bool
	skipGuards   bool
}

// afterCommit is a statement sent once the phase has committed
// (QueueAfterCommit).
type afterCommit struct {
	sql  string
	args []any
}

// QueueAfterCommit adds a statement sent behind the phase's COMMIT, in a
// transaction of its own (on the fast path, in the same round trip): for
// a signal that should follow the phase's commit rather than share it
// (jobs.wake says why). It runs only if the phase committed, and its own
// failure does not fail the phase, which has committed: it is logged
// (Config.Logger).
func (tx *Tx) QueueAfterCommit(sql string, args ...any) {
	tx.after = append(tx.after, afterCommit{sql, args})
}

// Next is the recovery point the phase's move (Move) takes the key to;
// empty before the phase says it, or when it sets the key aside or
// reopens it, which keeps its recovery point. For machinery that wraps a
// phase function, such as an endpoint's test seams.
func (tx *Tx) Next() RecoveryPoint {
	if tx.moved == nil || tx.moved.out.attention != "" || tx.moved.out.reopen {
		return ""
	}
	return tx.moved.out.next
}

// queuePipelined is Queue on the fast path: the statement waits in the
// pipeline for the next Flush or the COMMIT.
func (tx *Tx) queuePipelined(sql string, args ...any) *pgx.QueuedQuery {
	tx.lockFirst() // the phase's first statement is not its move
	return tx.batch.Queue(sql, args...)
}

// flushPipelined is Flush on the fast path: the queued statements go out
// in one round trip, and each result reaches its callback.
func (tx *Tx) flushPipelined(ctx context.Context) error {
	tx.lockFirst() // what goes out now must go out fenced
	if tx.err != nil {
		return tx.err
	}
	b := tx.batch
	tx.batch = &pgx.Batch{}
	return tx.conn.SendBatch(ctx, b).Close()
}

// movePipelined queues m, the phase's move, sql with args: as the fence,
// when it is the phase's first statement and moves the key on
// (fencedAdvanceSQL), and otherwise behind the lock that fences the phase.
func (tx *Tx) movePipelined(m *move, sql string, args []any) {
	if sql != advanceSQL {
		tx.queuePipelined(sql, args...)
		return
	}
	if tx.fenceFirst() {
		sql = fencedAdvanceSQL
	}
	tx.batch.Queue(sql, args...).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&m.stored, &m.firstForeignAttemptAt); err != nil {
			return fmt.Errorf("advance key %d from %s to %s: %w", tx.key.ID, tx.from, m.out.next, err)
		}
		return nil
	})
}

// phasePipelined is Phase on the fast path.
func (s *Store) phasePipelined(ctx context.Context, key *Key, fn PhaseFunc) error {
	defer s.metrics.PhaseDone(string(key.RecoveryPoint), time.Now())
	return s.retryPhase(ctx, key, fn, 1, nil)
}

// retryPhase makes attempts at fn from attempt on; err is the previous
// attempt's. A guard goes out with the first attempt only: it committed
// on its own, ahead of the phase (guard.go).
func (s *Store) retryPhase(ctx context.Context, key *Key, fn PhaseFunc, attempt int, err error) error {
	return s.retry(ctx, key, func(ctx context.Context, attempt int) error { return s.phaseOnce(ctx, key, fn, attempt > 1) }, attempt, err)
}

// phaseOnce makes one attempt at the atomic phase fn of key: its
// statements, BEGIN to COMMIT, go out in one round trip unless fn flushes
// on the way, and the in-memory key follows once COMMIT has answered.
func (s *Store) phaseOnce(ctx context.Context, key *Key, fn PhaseFunc, skipGuards bool) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("phase at %s for key %d: %w", key.RecoveryPoint, key.ID, err)
	}
	// A connection given back inside a transaction is closed by the pool,
	// which rolls the transaction back; rollback spares the reconnect.
	defer conn.Release()
	defer rollback(ctx, conn.Conn()) // a no-op once committed

	tx := &Tx{trace: traceparent(ctx), pipeline: pipeline{conn: conn.Conn(), batch: &pgx.Batch{}, skipGuards: skipGuards}}
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
	s.follow(ctx, key, q.moved)
	return nil
}

// queuedPhase is an atomic phase queued on a Tx, COMMIT included.
type queuedPhase struct {
	moved *move
	// committed is set when COMMIT has answered COMMIT.
	committed bool
}

// locked reports whether the request still holds the key after the
// phase: it moved the key to an intermediate recovery point, neither
// finishing it nor setting it aside or reopening it.
func (q *queuedPhase) locked() bool {
	out := q.moved.out
	return out.next != Finished && out.attention == "" && !out.reopen
}

// queuePhase queues, on tx, the atomic phase fn of key from recovery point
// from: BEGIN, fn's statements, the fence ahead of the first of them (most
// often the move itself), and COMMIT. Nothing is sent but what fn
// flushes.
func (s *Store) queuePhase(ctx context.Context, tx *Tx, key *Key, from RecoveryPoint, fn PhaseFunc) (*queuedPhase, error) {
	tx.begin = len(tx.batch.QueuedQueries)
	tx.batch.Queue(`BEGIN`)
	// The fence goes right after BEGIN: it goes on only if the key still
	// carries this request's lock token and recovery point, and otherwise
	// raises, which aborts the transaction. Nothing queued after it can
	// commit, so the phase sends its writes and COMMIT without waiting for
	// the fence's answer. When the phase's first statement is its move,
	// the move is the fence.
	tx.openFence(s, key, from)
	if err := fn(ctx, tx); err != nil {
		return nil, err
	}
	switch {
	case tx.err != nil:
		return nil, tx.err
	case tx.moved == nil:
		return nil, fmt.Errorf("bug: phase at %s for key %d says no move", from, key.ID)
	}
	q := &queuedPhase{moved: tx.moved}
	tx.queueCommit(&q.committed)
	return q, nil
}

// flushCommitted sends the queued statements, the phase's COMMIT the last
// of them, and behind it what QueueAfterCommit queued.
func (tx *Tx) flushCommitted(ctx context.Context) error {
	for _, a := range tx.after {
		tx.batch.Queue(a.sql, a.args...)
	}
	tx.after = nil
	return tx.flushPipelined(ctx)
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
// does not run. On the plain path, the two phases run one after the other.
//
// A phase Postgres aborts for a concurrent transaction is run again as
// Phase runs it, one phase at a time; the pipelined try counts as its
// first attempt.
func (s *Store) PhaseThen(ctx context.Context, key *Key, first, second PhaseFunc) error {
	if s.plain { // each Phase under its own deadline
		if err := s.Phase(ctx, key, first); err != nil || key.LockToken == nil || key.AttentionReason != nil {
			return err
		}
		return s.Phase(ctx, key, second)
	}
	ctx, cancel := context.WithTimeout(ctx, phaseTimeout) // the pair's, as Phase's
	defer cancel()
	start, from := time.Now(), key.RecoveryPoint
	pctx, span := startPhase(ctx, key) // one span for the pipeline's phases (trace.go)
	q, q2, err := s.phasesOnce(pctx, key, first, second)
	endPhase(pctx, span, key, from, pipelinedVia(q, q2), err)
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
		s.metrics.PhaseDone(string(q.moved.out.next), start)
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

	tx := &Tx{trace: traceparent(ctx), pipeline: pipeline{conn: conn.Conn(), batch: &pgx.Batch{}}}
	q1, err = s.queuePhase(ctx, tx, key, key.RecoveryPoint, first)
	if err != nil {
		return nil, nil, s.fenceError(key, err)
	}
	var stopped error // second's own, before it was sent
	if q1.locked() {
		// The second's BEGIN follows the first's COMMIT: every transaction
		// in the pipeline is explicit, since a statement sent before a
		// BEGIN in the same implicit block would be folded into the
		// BEGIN's transaction.
		q2, stopped = s.queuePhase(ctx, tx, key, q1.moved.out.next, second)
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
	s.follow(ctx, key, q1.moved)
	switch {
	case stopped != nil:
		return q1, nil, s.fenceError(key, stopped)
	case err != nil:
		return q1, nil, s.fenceError(key, fmt.Errorf("phase at %s for key %d: %w", key.RecoveryPoint, key.ID, err))
	case q2 != nil:
		s.follow(ctx, key, q2.moved)
	}
	return q1, q2, nil
}

// queueCommit queues COMMIT. committed is set once Postgres has answered
// COMMIT; a transaction that Postgres ends with ROLLBACK instead (it
// failed earlier) is pgx.ErrTxCommitRollback.
func (tx *Tx) queueCommit(committed *bool) {
	tx.batch.Queue(`COMMIT`).Exec(func(tag pgconn.CommandTag) error {
		if tag.String() != "COMMIT" {
			return pgx.ErrTxCommitRollback
		}
		*committed = true
		return nil
	})
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

// pipelinedVia is the recovery point between two phases that PhaseThen
// committed in one round trip, for their span's name; "" for fewer.
func pipelinedVia(q1, q2 *queuedPhase) RecoveryPoint {
	if q1 == nil || q2 == nil {
		return ""
	}
	return q1.moved.out.next
}
