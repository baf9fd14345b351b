// Second reading: how a staged job wakes an idle enqueuer.

package jobs

// afterCommitQueuer is a Queuer that can send a statement once its
// transaction has committed, in a transaction of its own (idem.Tx).
type afterCommitQueuer interface {
	QueueAfterCommit(sql string, args ...any)
}

// wakeSQL signals Channel.
const wakeSQL = `SELECT pg_notify($1, '')`

// wake signals Channel once the jobs q stages are committed, so that an
// idle enqueuer moves them at once instead of on its next poll.
//
// On an atomic phase the NOTIFY goes after the phase's COMMIT, in the same
// round trip, not inside the phase. A transaction that notifies takes a
// lock on the whole database as it commits and holds it until its commit
// record is flushed: phases that notified committed one at a time, each
// waiting out the one before's flush, where other commits share a flush.
// Sent on its own the NOTIFY's transaction writes nothing, so it holds the
// lock for no flush. It runs only if the phase committed; should it fail
// (logged) or not run at all (the api stops in between), the enqueuer's
// poll finds the job (EnqueuerConfig.PollInterval). On any other Queuer
// (a pgx.Batch) the NOTIFY is queued in the transaction, delivered if it
// commits.
func wake(q Queuer) {
	if a, ok := q.(afterCommitQueuer); ok {
		a.QueueAfterCommit(wakeSQL, Channel)
		return
	}
	q.Queue(wakeSQL, Channel)
}
