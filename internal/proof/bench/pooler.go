package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet"
)

// stepPooler measures new rides from 4 api processes connected directly,
// then from 4 through PgBouncer in transaction mode, with the most client
// connections Postgres served the api database meanwhile: what the pooler
// costs in throughput against what it saves in connections.
func (r *run) stepPooler(ctx context.Context) error {
	poolerPort, err := fleet.FreePort()
	if err != nil {
		return err
	}
	p, err := localpg.NewPooler(localpg.PoolerOptions{Dir: filepath.Join(r.cfg.DataDir, "pgbouncer"), Port: poolerPort, UpstreamPort: r.cluster.Port})
	if err != nil {
		return err
	}
	if err := p.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = p.Stop(context.WithoutCancel(ctx)) }()

	var direct float64
	for i, via := range []string{"direct", fmt.Sprintf("through PgBouncer (%s mode, pool %d)", p.PoolMode, p.PoolSize)} {
		// Pools of 16: enough for each process to open as many
		// connections as its share of the clients asks for, which is
		// what the pooler is there to cap.
		env := []string{"DATABASE_MAX_CONNS=16"}
		if i == 1 {
			// cache_describe: docs/scaling.md says why.
			env = append(env, "DATABASE_URL="+p.DatabaseURL(apiDB)+"&default_query_exec_mode=cache_describe")
		}
		var apis []*fleet.Process
		for range 4 {
			a, err := r.fleet.Start(ctx, "api", env...)
			if err != nil {
				return err
			}
			apis = append(apis, a)
		}
		conns, stop := r.watchConnections(ctx)
		res, err := r.measure(ctx, r.rideLoad(fmt.Sprintf("pooler%d", i), 32, apis),
			Figure{Step: "2c pooler", Name: "4 api processes (pool 16 each), " + via, Unit: "rides/s", RatioOf: "4 direct"}, direct,
			func(LoadResult, int64) string {
				return fmt.Sprintf("Postgres client connections to the api database: at most %d (the bench's own pool included)", conns())
			})
		stop()
		for _, a := range apis {
			err = errors.Join(err, a.Stop(ctx))
		}
		if err != nil {
			return err
		}
		if i == 0 {
			direct = res.Rate
		}
	}
	return nil
}

// watchConnections samples pg_stat_activity until stop, and most reports
// the most client backends connected to the api database in a sample.
func (r *run) watchConnections(ctx context.Context) (most func() int, stop func()) {
	var (
		mu      sync.Mutex
		highest int
		wg      sync.WaitGroup
	)
	done := make(chan struct{})
	wg.Go(func() {
		for {
			var n int
			if err := r.db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()`, apiDB).Scan(&n); err == nil {
				mu.Lock()
				highest = max(highest, n)
				mu.Unlock()
			}
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	return func() int { mu.Lock(); defer mu.Unlock(); return highest }, func() { close(done); wg.Wait() }
}
