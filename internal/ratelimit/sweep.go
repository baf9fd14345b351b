package ratelimit

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketrides/rocketrides/internal/platform/loop"
)

// SweepInterval is how often the api deletes the windows that have
// ended.
const SweepInterval = time.Minute

// sweepSQL deletes the windows that have ended, and the charge cap's
// rows whose every charge has left its window. A subject that comes back
// starts again, as it would on the row; what the sweep keeps from growing
// is the rows of subjects that never come back (an unknown token, an
// address seen once).
const sweepSQL = `
	WITH windows AS (DELETE FROM rate_limit_windows WHERE ends_at <= now() RETURNING 1),
	     charges AS (DELETE FROM rate_limit_charges WHERE ends_at <= now() RETURNING 1)
	SELECT (SELECT count(*) FROM windows) + (SELECT count(*) FROM charges)`

// Sweep deletes the windows that have ended, and reports how many.
func Sweep(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	if err := pool.QueryRow(ctx, sweepSQL).Scan(&n); err != nil {
		return 0, fmt.Errorf("sweep rate limit windows: %w", err)
	}
	return n, nil
}

// Sweeper is a loop that sweeps pool's ended windows every SweepInterval
// until its context ends. Every api instance runs one: the table is
// unlogged and small, so a sweep costs no WAL and little time, and
// several at once only find less to delete.
func Sweeper(pool *pgxpool.Pool, logger *slog.Logger) (*loop.Loop, error) {
	return loop.New(&loop.Config{
		Work: func(ctx context.Context) (bool, error) {
			n, err := Sweep(ctx, pool)
			if n > 0 {
				logger.DebugContext(ctx, "Swept ended rate limit windows", slog.Int64("windows", n))
			}
			return false, err
		},
		PollInterval: SweepInterval,
		Logger:       logger,
	})
}
