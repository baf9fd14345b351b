package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// keptRuns is how many runs reconcile_runs keeps: enough to see whether a
// finding is new, few enough never to need a reaper of its own.
const keptRuns = 50

// Record stores rep as the latest run, in reconcile_runs (which this
// package owns), so that a person can read the findings (the console) and
// not only the log lines. Older runs beyond the last few are forgotten in
// the same transaction.
func (r *Reconciler) Record(ctx context.Context, rep *Report) error {
	found := make([]finding, len(rep.Discrepancies))
	for i, d := range rep.Discrepancies {
		found[i] = finding(d)
	}
	data, err := json.Marshal(found)
	if err != nil {
		return fmt.Errorf("encode findings: %w", err)
	}
	restored, err := json.Marshal(append([]Restoration{}, rep.Restored...))
	if err != nil {
		return fmt.Errorf("encode restorations: %w", err)
	}
	err = pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
			INSERT INTO reconcile_runs (since, until, charges, rides, pending, discrepancies, restored)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			rep.Since, rep.Until, rep.Charges, rep.Rides, rep.Pending, json.RawMessage(data), json.RawMessage(restored)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
			DELETE FROM reconcile_runs
			WHERE id < (SELECT min(id) FROM (SELECT id FROM reconcile_runs ORDER BY id DESC LIMIT $1) AS kept)`,
			keptRuns)
		return err
	})
	if err != nil {
		return fmt.Errorf("record reconciliation: %w", err)
	}
	return nil
}

// finding is a Discrepancy as reconcile_runs stores it.
type finding struct {
	Kind     Kind   `json:"kind"`
	ChargeID string `json:"charge_id,omitempty"`
	RideID   int64  `json:"ride_id,omitempty"`
	Detail   string `json:"detail"`
}

// Run is a recorded reconciliation.
type Run struct {
	RanAt time.Time
	Report
}

// Latest returns the latest recorded run, or nil if none was recorded.
func Latest(ctx context.Context, pool *pgxpool.Pool) (*Run, error) {
	var (
		run            Run
		data, restored []byte
	)
	err := pool.QueryRow(ctx, `
		SELECT ran_at, since, until, charges, rides, pending, discrepancies, restored
		FROM reconcile_runs ORDER BY id DESC LIMIT 1`,
	).Scan(&run.RanAt, &run.Since, &run.Until, &run.Charges, &run.Rides, &run.Pending, &data, &restored)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read latest reconciliation: %w", err)
	}
	var found []finding
	if err := json.Unmarshal(data, &found); err != nil {
		return nil, fmt.Errorf("decode latest reconciliation: %w", err)
	}
	for _, f := range found {
		run.Discrepancies = append(run.Discrepancies, Discrepancy(f))
	}
	if err := json.Unmarshal(restored, &run.Restored); err != nil {
		return nil, fmt.Errorf("decode latest reconciliation's restorations: %w", err)
	}
	return &run, nil
}
