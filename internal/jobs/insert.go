// Second reading: how the enqueuer's batch (enqueuer.go) goes into
// River: each staged job's args passed through as they were stored, two
// copies of one unique job kept to one, and the batch's log line.

package jobs

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// stagedArgs carries a staged job into River as it was stored: River
// encodes job args with json.Marshal, which returns these bytes as they
// are. Passing them through rather than decoding into the concrete args
// type keeps any field this build does not know about.
type stagedArgs struct {
	kind string
	args json.RawMessage
}

func (a stagedArgs) Kind() string                 { return a.kind }
func (a stagedArgs) MarshalJSON() ([]byte, error) { return a.args, nil }

// insertParams is what River inserts for a batch of staged jobs, and how
// many of them it leaves out as copies of a unique job already in the
// batch.
func (e *Enqueuer) insertParams(staged []stagedJob) ([]river.InsertManyParams, int) {
	params := make([]river.InsertManyParams, 0, len(staged))
	seen := make(map[string]bool)
	batchDuplicates := 0
	for _, job := range staged {
		opts := e.opts[job.JobName]
		// River inserts the batch in one INSERT ... ON CONFLICT on the
		// unique key, and Postgres refuses a statement that hits the same
		// key twice, so two staged copies of one unique job would fail
		// this batch on every attempt. Keep the first: River would have
		// skipped the second anyway. job_args comes back as jsonb text,
		// so equal args are equal strings.
		if key, unique := uniqueKey(job, opts.UniqueOpts); unique {
			if seen[key] {
				batchDuplicates++
				continue
			}
			seen[key] = true
		}
		params = append(params, river.InsertManyParams{
			Args:       stagedArgs{kind: job.JobName, args: job.JobArgs},
			InsertOpts: withTrace(opts, job.Trace),
		})
	}
	return params, batchDuplicates
}

// uniqueKey returns what decides, within one batch, whether two staged
// jobs are the same unique job in River, and whether the kind is unique at
// all. Jobs of a batch share queue and insert time, so only kind and,
// with ByArgs, the args can tell them apart.
func uniqueKey(job stagedJob, opts river.UniqueOpts) (string, bool) {
	if !opts.ByArgs && opts.ByPeriod == 0 && !opts.ByQueue && opts.ByState == nil && !opts.ExcludeKind {
		return "", false
	}
	key := ""
	if !opts.ExcludeKind {
		key = job.JobName
	}
	if opts.ByArgs {
		key += "\x00" + string(job.JobArgs)
	}
	return key, true
}

// logMoved logs a committed batch: the jobs moved, and how many of them
// were unique jobs River already had or the batch held twice.
func (e *Enqueuer) logMoved(ctx context.Context, staged []stagedJob, batchDuplicates int, results []*rivertype.JobInsertResult) {
	duplicates := batchDuplicates
	for _, r := range results {
		if r.UniqueSkippedAsDuplicate {
			duplicates++
		}
	}
	e.logger.InfoContext(ctx, "Moved staged jobs into River",
		slog.Int("jobs", len(staged)),
		slog.Int("unique_duplicates_skipped", duplicates),
		slog.Int64("first_staged_id", staged[0].ID),
		slog.Int64("last_staged_id", staged[len(staged)-1].ID),
	)
}
