// Package jobs owns background work: jobs staged inside a request's
// transaction (staged_jobs), the enqueuer that moves them into River once
// that transaction has committed, and River's workers (ride receipts).
//
// Staging is what makes a job part of an atomic phase. Inserting straight
// into a queue from inside a transaction would let a worker pick up a job
// whose transaction later rolls back, or never see a job whose
// transaction committed after the queue insert failed; a staged job
// exists if and only if the phase that staged it committed.
package jobs

import (
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// StagedChannel is the NOTIFY channel a phase signals after staging a
// job, so that an idle enqueuer wakes at commit instead of on its next
// poll.
const StagedChannel = "staged_jobs"

// ReceiptArgs are the arguments of a send_ride_receipt job: everything a
// receipt shows, captured when the charge was recorded.
type ReceiptArgs struct {
	RideID         int64  `json:"ride_id"`
	UserID         int64  `json:"user_id"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	StripeChargeID string `json:"stripe_charge_id"`
}

// Kind is the job's name in staged_jobs and in River.
func (ReceiptArgs) Kind() string { return "send_ride_receipt" }

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
	// The NOTIFY is delivered only if tx commits, and at most once per
	// transaction however many jobs it stages. One statement does both, so
	// staging adds one statement to the phase.
	q.Queue(`
		WITH staged AS (
			INSERT INTO staged_jobs (job_name, job_args) VALUES ($1, $2) RETURNING id
		)
		SELECT pg_notify($3, '') FROM staged`,
		args.Kind(), payload, StagedChannel)
	return nil
}

// InsertOpts makes a receipt job unique per set of args, and so per ride:
// every field is fixed once the ride's charge is recorded. Should a ride's
// receipt ever be staged twice, River keeps only one job while the first
// is queued, running or recently completed, so two workers never race to
// send the same receipt. The ride_receipts check in the worker is what
// stops a second send after that (see ReceiptWorker).
func (ReceiptArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
}
