package process

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/platform/metrics"
)

// OpenDatabase opens a background process's connection pool and the
// registry its metrics go to, which already reports the pool. Close the
// pool with Program.Close.
func OpenDatabase(ctx context.Context, url string) (*pgxpool.Pool, *prometheus.Registry, error) {
	pool, err := db.Open(ctx, url, 0)
	if err != nil {
		return nil, nil, err
	}
	reg := metrics.NewRegistry()
	metrics.RegisterPool(reg, pool)
	return pool, reg, nil
}
