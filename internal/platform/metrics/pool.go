package metrics

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// RegisterPool registers a collector of pool's statistics on reg. They
// are read from pool.Stat() at scrape time, so they cost nothing between
// scrapes.
func RegisterPool(reg prometheus.Registerer, pool *pgxpool.Pool) {
	reg.MustRegister(&poolCollector{pool: pool})
}

func poolDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "db_pool", name), help, nil, nil)
}

var (
	poolAcquired = poolDesc("acquired_connections", "Connections currently in use.")
	poolIdle     = poolDesc("idle_connections", "Connections currently idle in the pool.")
	poolTotal    = poolDesc("total_connections", "Connections in the pool: acquired, idle and being opened.")
	poolMax      = poolDesc("max_connections", "The most connections the pool opens.")
	poolAcquires = poolDesc("acquires_total", "Connections acquired from the pool.")
	poolWait     = poolDesc("acquire_duration_seconds_total",
		"Time spent acquiring connections. Its rate over acquires_total's is the mean acquire time.")
	poolEmpty = poolDesc("empty_acquires_total",
		"Acquires that found no idle connection and had to wait for one or open one: a pool too small shows here first.")
	poolCanceled = poolDesc("canceled_acquires_total", "Acquires abandoned because their context ended.")
)

type poolCollector struct {
	pool *pgxpool.Pool
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolAcquired, poolIdle, poolTotal, poolMax, poolAcquires, poolWait, poolEmpty, poolCanceled} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(poolAcquired, float64(s.AcquiredConns()))
	gauge(poolIdle, float64(s.IdleConns()))
	gauge(poolTotal, float64(s.TotalConns()))
	gauge(poolMax, float64(s.MaxConns()))
	counter(poolAcquires, float64(s.AcquireCount()))
	counter(poolWait, s.AcquireDuration().Seconds())
	counter(poolEmpty, float64(s.EmptyAcquireCount()))
	counter(poolCanceled, float64(s.CanceledAcquireCount()))
}

// NewCommitsConfirmed registers the gauge of who confirms the database's
// commits, as the api's /readyz last found it (db.Durability): 1 while a
// synchronous standby confirms each before it is acknowledged, 0 while the
// primary alone does. A replicated deployment alerts on 0; a single-node
// one is always 0.
func NewCommitsConfirmed(reg prometheus.Registerer) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace,
		Name:      "db_commits_confirmed_by_standby",
		Help:      "1 while a synchronous standby confirms commits, 0 while the primary alone does (as /readyz last found).",
	})
	reg.MustRegister(g)
	return g
}
