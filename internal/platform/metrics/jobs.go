package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
)

// jobEvents are the River events that end one run of a job.
var jobEvents = []river.EventKind{
	river.EventKindJobCompleted,
	river.EventKindJobFailed,
	river.EventKindJobCancelled,
	river.EventKindJobSnoozed,
}

// WatchJobs registers worker metrics on reg and feeds them from client's
// own job events: runs by kind and result, run time and time spent
// waiting in the queue. Call it before starting client. It records until
// client stops, which closes the subscription.
func WatchJobs[TTx any](reg prometheus.Registerer, client *river.Client[TTx]) {
	runs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace,
		Name:      "worker_jobs_total",
		Help:      "Job runs finished by this worker, by job kind and result (job_completed, job_failed, job_cancelled, job_snoozed).",
	}, []string{"kind", "result"})
	buckets := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
	runTime := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace,
		Name:      "worker_job_run_duration_seconds",
		Help:      "Time a job's worker ran, by job kind.",
		Buckets:   buckets,
	}, []string{"kind"})
	queueWait := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace,
		Name:      "worker_job_queue_wait_seconds",
		Help:      "Time a job waited, available, before a worker took it, by job kind.",
		Buckets:   buckets,
	}, []string{"kind"})
	reg.MustRegister(runs, runTime, queueWait)

	events, _ := client.Subscribe(jobEvents...)
	go func() {
		for e := range events {
			if e.Job == nil {
				continue
			}
			runs.WithLabelValues(e.Job.Kind, string(e.Kind)).Inc()
			if e.JobStats != nil {
				runTime.WithLabelValues(e.Job.Kind).Observe(e.JobStats.RunDuration.Seconds())
				queueWait.WithLabelValues(e.Job.Kind).Observe(e.JobStats.QueueWaitDuration.Seconds())
			}
		}
	}()
}

// NewEnqueued registers the counter of staged jobs the enqueuer moved into
// River.
func NewEnqueued(reg prometheus.Registerer) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: namespace,
		Name:      "enqueuer_jobs_enqueued_total",
		Help:      "Staged jobs moved into River, each in the transaction that deleted it.",
	})
	reg.MustRegister(c)
	return c
}
