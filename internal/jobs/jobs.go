// First reading: staged jobs, which an atomic phase records (Stage) for
// the enqueuer (enqueuer.go) to move into River. Left to a second reading:
// the jobs still waiting (waiting.go), the receipt job (receipt.go), the
// River client that works the jobs (client.go) and how a staged job wakes
// the enqueuer (wake.go).

// Package jobs owns the work done after a request, outside it: staged
// jobs (the staged_jobs table) and the enqueuer that moves them into River
// (enqueuer.go), the receipt job and its worker (receipt.go, which owns
// ride_receipts), and the River client that works them (client.go).
// Delivering mail is not here: package mail of the platform sends what the
// receipt job composes.
//
// Staging is what makes a job part of an atomic phase. Inserting straight
// into a queue from inside a transaction would let a worker pick up a job
// whose transaction later rolls back, or never see a job whose
// transaction committed after the queue insert failed; a staged job
// exists if and only if the phase that staged it committed.
//
// The enqueuer knows no particular job: the kinds it moves are the ones
// its EnqueuerConfig lists (Kinds, today the receipt job alone).
package jobs

import (
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// Channel is the NOTIFY channel a phase signals after staging a job, so
// that an idle enqueuer wakes at commit instead of on its next poll.
const Channel = "staged_jobs"

// Queuer takes statements to send later, pipelined with others: an
// atomic phase's transaction (idem.Tx) or a pgx.Batch.
type Queuer interface {
	Queue(sql string, args ...any) *pgx.QueuedQuery
}

// Stage queues the recording of a job on q. The job becomes visible to the
// enqueuer, and so to River, only when the transaction that q's
// statements run in commits.
func Stage(q Queuer, args river.JobArgs) error {
	payload, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("encode %s job args: %w", args.Kind(), err)
	}
	q.Queue(`INSERT INTO staged_jobs (job_name, job_args, traceparent) VALUES ($1, $2, $3)`, args.Kind(), json.RawMessage(payload), traceOf(q))
	wake(q) // an idle enqueuer, once the job is committed (wake.go)
	return nil
}
