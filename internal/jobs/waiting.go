// Second reading: the staged jobs still waiting: how many (Waiting, for
// the console), and those of a kind no worker handles, which the
// enqueuer leaves in staged_jobs and reports.

package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// Waiting counts the staged jobs the enqueuer has not moved into River
// yet.
func Waiting(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (int, error) {
	var n int
	if err := q.QueryRow(ctx, `SELECT count(*) FROM staged_jobs`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count staged jobs: %w", err)
	}
	return n, nil
}

// unknownKindsInterval is how often the enqueuer repeats its complaint
// about staged jobs it refuses to move.
const unknownKindsInterval = time.Minute

// reportUnknownKinds logs, at most once per unknownKindsInterval, the staged
// jobs the enqueuer refuses to move because no worker handles their kind.
// They would otherwise wait silently forever.
func (e *Enqueuer) reportUnknownKinds(ctx context.Context) {
	e.mu.Lock()
	due := time.Since(e.lastUnknownReport) >= unknownKindsInterval
	if due {
		e.lastUnknownReport = time.Now()
	}
	e.mu.Unlock()
	if !due {
		return
	}

	type unknownKind struct {
		JobName string    `db:"job_name"`
		Staged  int64     `db:"staged"`
		Oldest  time.Time `db:"oldest"`
	}
	rows, err := e.pool.Query(ctx, `
		SELECT job_name, count(*) AS staged, min(created_at) AS oldest
		FROM staged_jobs
		WHERE job_name <> ALL($1)
		GROUP BY job_name
		ORDER BY job_name`,
		e.kinds,
	)
	if err == nil {
		var unknown []unknownKind
		unknown, err = pgx.CollectRows(rows, pgx.RowToStructByName[unknownKind])
		for _, u := range unknown {
			e.logger.ErrorContext(ctx, "Staged jobs of an unknown kind are not moved to River; deploy a worker for the kind or delete the jobs",
				slog.String("job_name", u.JobName),
				slog.Int64("staged", u.Staged),
				slog.Time("oldest", u.Oldest),
				slog.Any("known_kinds", e.kinds),
			)
		}
	}
	if err != nil {
		// Only the report failed; moving jobs goes on.
		e.logger.WarnContext(ctx, "Look for staged jobs of unknown kinds", slog.Any("error", err))
	}
}
