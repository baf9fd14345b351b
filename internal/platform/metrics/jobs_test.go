package metrics_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/metrics"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
)

type watchArgs struct {
	Fail bool `json:"fail"`
}

func (watchArgs) Kind() string { return "metrics_watch_test" }

type watchWorker struct {
	river.WorkerDefaults[watchArgs]
}

func (watchWorker) Work(_ context.Context, job *river.Job[watchArgs]) error {
	if job.Args.Fail {
		return errors.New("failing on purpose")
	}
	return nil
}

func TestWatchJobs(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	workers := river.NewWorkers()
	river.AddWorker(workers, watchWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:  slog.New(slog.DiscardHandler),
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		Workers: workers,
	})
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	metrics.WatchJobs(reg, client)
	require.NoError(t, client.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(ctx))
	})

	_, err = client.InsertMany(t.Context(), []river.InsertManyParams{
		{Args: watchArgs{}},
		{Args: watchArgs{}},
		// One attempt only, so that no retry changes the count below.
		{Args: watchArgs{Fail: true}, InsertOpts: &river.InsertOpts{MaxAttempts: 1}},
	})
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		out := scrape(t, reg)
		return containsAll(out,
			`rocketrides_worker_jobs_total{kind="metrics_watch_test",result="job_completed"} 2`,
			`rocketrides_worker_jobs_total{kind="metrics_watch_test",result="job_failed"} 1`,
			`rocketrides_worker_job_run_duration_seconds_count{kind="metrics_watch_test"} 3`,
			`rocketrides_worker_job_queue_wait_seconds_count{kind="metrics_watch_test"} 3`,
		)
	}, time.Minute, 50*time.Millisecond, "the worker metrics never showed the three runs")
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
