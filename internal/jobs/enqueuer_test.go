package jobs_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/rocketrides/rocketrides/internal/jobs"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
)

func TestEnqueuer(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		ctx  context.Context
		pool *pgxpool.Pool
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{ctx: t.Context(), pool: dbtest.New(t)}
	}

	newEnqueuer := func(t *testing.T, pool *pgxpool.Pool, config jobs.EnqueuerConfig) *jobs.Enqueuer {
		t.Helper()
		config.Pool = pool
		config.Kinds = jobs.Kinds()
		config.Logger = testLogger(t)
		e, err := jobs.NewEnqueuer(&config)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}

	runOnce := func(t *testing.T, bundle *testBundle, e *jobs.Enqueuer) int {
		t.Helper()
		moved, err := e.RunOnce(bundle.ctx)
		if err != nil {
			t.Fatalf("RunOnce: %v", err)
		}
		return moved
	}

	t.Run("ReportsMovedJobs", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		stage(t, bundle.pool, jobs.ReceiptArgs{RideID: 1, UserID: 1, Amount: 20_00, Currency: "usd", StripeChargeID: "ch_1"})
		stage(t, bundle.pool, jobs.ReceiptArgs{RideID: 2, UserID: 1, Amount: 20_00, Currency: "usd", StripeChargeID: "ch_2"})
		var reported []int
		enqueuer := newEnqueuer(t, bundle.pool, jobs.EnqueuerConfig{OnMoved: func(n int) { reported = append(reported, n) }})
		runOnce(t, bundle, enqueuer)
		runOnce(t, bundle, enqueuer) // nothing left: not reported
		if len(reported) != 1 || reported[0] != 2 {
			t.Fatalf("reported %v, want [2]", reported)
		}
	})

	t.Run("MovesStagedJobsIntoRiver", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		args := jobs.ReceiptArgs{RideID: 7, UserID: 3, Amount: 20_00, Currency: "usd", StripeChargeID: "ch_123"}
		stage(t, bundle.pool, args)

		if moved := runOnce(t, bundle, newEnqueuer(t, bundle.pool, jobs.EnqueuerConfig{})); moved != 1 {
			t.Fatalf("moved = %d, want 1", moved)
		}

		found := riverJobs(t, bundle.pool)
		if len(found) != 1 {
			t.Fatalf("river jobs = %d, want 1", len(found))
		}
		job := found[0]
		if job.Kind != "send_ride_receipt" || job.State != "available" || job.Queue != river.QueueDefault {
			t.Errorf("river job kind=%s state=%s queue=%s, want send_ride_receipt available %s",
				job.Kind, job.State, job.Queue, river.QueueDefault)
		}
		var got jobs.ReceiptArgs
		if err := json.Unmarshal(job.Args, &got); err != nil {
			t.Fatalf("decode river job args %s: %v", job.Args, err)
		}
		if got != args {
			t.Errorf("river job args = %+v, want %+v", got, args)
		}
		if n := countRows(t, bundle.pool, "staged_jobs"); n != 0 {
			t.Errorf("staged jobs left = %d, want 0", n)
		}
	})

	t.Run("NoStagedJobs", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		if moved := runOnce(t, bundle, newEnqueuer(t, bundle.pool, jobs.EnqueuerConfig{})); moved != 0 {
			t.Fatalf("moved = %d, want 0", moved)
		}
		if n := countRows(t, bundle.pool, "river_job"); n != 0 {
			t.Errorf("river jobs = %d, want 0", n)
		}
	})

	t.Run("DrainsInBatches", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		stage(t, bundle.pool, receipts(1, 25)...)
		e := newEnqueuer(t, bundle.pool, jobs.EnqueuerConfig{BatchSize: 10})

		var batches []int
		for moved := runOnce(t, bundle, e); moved > 0; moved = runOnce(t, bundle, e) {
			batches = append(batches, moved)
		}
		if want := []int{10, 10, 5}; !reflect.DeepEqual(batches, want) {
			t.Fatalf("batches = %v, want %v", batches, want)
		}
		if n := countRows(t, bundle.pool, "staged_jobs"); n != 0 {
			t.Errorf("staged jobs left = %d, want 0", n)
		}
		// Staging order survives the move.
		found := riverJobs(t, bundle.pool)
		if len(found) != 25 {
			t.Fatalf("river jobs = %d, want 25", len(found))
		}
		for i, job := range found {
			var got jobs.ReceiptArgs
			if err := json.Unmarshal(job.Args, &got); err != nil {
				t.Fatal(err)
			}
			if got.RideID != int64(i+1) {
				t.Fatalf("river job %d is ride %d, want %d", i, got.RideID, i+1)
			}
		}
	})

	t.Run("ConcurrentEnqueuersMoveEachJobOnce", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		const total = 2000
		stage(t, bundle.pool, receipts(1, total)...)

		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			moved int
		)
		for range 2 {
			e := newEnqueuer(t, bundle.pool, jobs.EnqueuerConfig{BatchSize: 100})
			wg.Go(func() {
				for {
					n, err := e.RunOnce(bundle.ctx)
					if err != nil {
						t.Errorf("RunOnce: %v", err)
						return
					}
					if n == 0 {
						return
					}
					mu.Lock()
					moved += n
					mu.Unlock()
				}
			})
		}
		wg.Wait()

		if moved != total {
			t.Errorf("moved = %d, want %d", moved, total)
		}
		if n := countRows(t, bundle.pool, "staged_jobs"); n != 0 {
			t.Errorf("staged jobs left = %d, want 0", n)
		}
		var inRiver, distinctRides int
		if err := bundle.pool.QueryRow(bundle.ctx,
			`SELECT count(*), count(DISTINCT args->>'ride_id') FROM river_job`,
		).Scan(&inRiver, &distinctRides); err != nil {
			t.Fatal(err)
		}
		if inRiver != total || distinctRides != total {
			t.Errorf("river jobs = %d for %d distinct rides, want %d each", inRiver, distinctRides, total)
		}
	})

	t.Run("RolledBackStageLeavesNothing", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		tx, err := bundle.pool.Begin(bundle.ctx)
		if err != nil {
			t.Fatal(err)
		}
		var b pgx.Batch
		if err := jobs.Stage(&b, receipts(1, 1)[0]); err != nil {
			t.Fatal(err)
		}
		if err := tx.SendBatch(bundle.ctx, &b).Close(); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(bundle.ctx); err != nil {
			t.Fatal(err)
		}

		if moved := runOnce(t, bundle, newEnqueuer(t, bundle.pool, jobs.EnqueuerConfig{})); moved != 0 {
			t.Fatalf("moved = %d, want 0", moved)
		}
		for _, table := range []string{"staged_jobs", "river_job"} {
			if n := countRows(t, bundle.pool, table); n != 0 {
				t.Errorf("rows in %s = %d, want 0", table, n)
			}
		}
	})

	t.Run("LeavesUnknownKindsStaged", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		stage(t, bundle.pool, unknownArgs{N: 1}, receipts(1, 1)[0], unknownArgs{N: 2})
		e := newEnqueuer(t, bundle.pool, jobs.EnqueuerConfig{BatchSize: 1})

		// The unknown job staged first must not hold up the known one.
		if moved := runOnce(t, bundle, e); moved != 1 {
			t.Fatalf("first batch moved %d, want 1", moved)
		}
		if moved := runOnce(t, bundle, e); moved != 0 {
			t.Fatalf("second batch moved %d, want 0", moved)
		}
		found := riverJobs(t, bundle.pool)
		if len(found) != 1 || found[0].Kind != "send_ride_receipt" {
			t.Fatalf("river jobs = %+v, want the receipt only", found)
		}
		if n := countRows(t, bundle.pool, "staged_jobs"); n != 2 {
			t.Errorf("staged jobs left = %d, want the 2 unknown ones", n)
		}
	})

	t.Run("DuplicateReceiptBecomesOneJob", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		args := receipts(1, 1)[0]
		stage(t, bundle.pool, args)
		stage(t, bundle.pool, args)

		if moved := runOnce(t, bundle, newEnqueuer(t, bundle.pool, jobs.EnqueuerConfig{})); moved != 2 {
			t.Fatalf("moved = %d, want 2", moved)
		}
		if n := countRows(t, bundle.pool, "staged_jobs"); n != 0 {
			t.Errorf("staged jobs left = %d, want 0", n)
		}
		if n := countRows(t, bundle.pool, "river_job"); n != 1 {
			t.Errorf("river jobs = %d, want 1 (unique per ride)", n)
		}
	})

	t.Run("RunWakesOnNotify", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		// Far longer than the test may take: only a notification can
		// explain a move within the minute, however slow the machine.
		stop := startRun(t, newEnqueuer(t, bundle.pool, jobs.EnqueuerConfig{PollInterval: time.Hour}))

		// Run's first batch comes after its LISTEN, so once this job has
		// moved the enqueuer is listening.
		stage(t, bundle.pool, receipts(1, 1)...)
		waitForRiverJobs(t, bundle.pool, 1, time.Minute)

		stage(t, bundle.pool, receipts(2, 1)...)
		waitForRiverJobs(t, bundle.pool, 2, time.Minute)
		stop()
	})

	t.Run("RunListensAgainAfterLosingItsConnection", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		stop := startRun(t, newEnqueuer(t, bundle.pool, jobs.EnqueuerConfig{PollInterval: time.Hour}))

		// What a Postgres restart does to the listening connection.
		first := listenerPID(t, bundle.pool, 0)
		if _, err := bundle.pool.Exec(bundle.ctx, `SELECT pg_terminate_backend($1)`, first); err != nil {
			t.Fatal(err)
		}
		listenerPID(t, bundle.pool, first)

		// The poll is an hour away: a move within the minute is the
		// notification on the new connection.
		stage(t, bundle.pool, receipts(1, 1)...)
		waitForRiverJobs(t, bundle.pool, 1, time.Minute)
		stop()
	})

	t.Run("RefusesBadConfig", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		for _, tc := range []struct {
			config *jobs.EnqueuerConfig
			field  string
		}{
			{nil, "EnqueuerConfig.Pool"},
			{&jobs.EnqueuerConfig{Kinds: jobs.Kinds()}, "EnqueuerConfig.Pool"},
			{&jobs.EnqueuerConfig{Pool: bundle.pool}, "EnqueuerConfig.Kinds"},
			{&jobs.EnqueuerConfig{Pool: bundle.pool, Kinds: jobs.Kinds(), BatchSize: -1}, "EnqueuerConfig.BatchSize"},
			{&jobs.EnqueuerConfig{Pool: bundle.pool, Kinds: jobs.Kinds(), PollInterval: -time.Second}, "EnqueuerConfig.PollInterval"},
		} {
			_, err := jobs.NewEnqueuer(tc.config)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("NewEnqueuer(%+v) = %v, want an error naming %s", tc.config, err, tc.field)
			}
		}
	})

	t.Run("RunReturnsWhenCancelledBeforeStarting", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		e := newEnqueuer(t, bundle.pool, jobs.EnqueuerConfig{PollInterval: time.Hour})

		ctx, cancel := context.WithCancel(bundle.ctx)
		cancel()
		if err := e.Run(ctx); err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	})
}

// unknownArgs is a job no worker handles.
type unknownArgs struct {
	N int `json:"n"`
}

func (unknownArgs) Kind() string { return "no_such_job" }

// stage commits args as staged jobs in one transaction, as an atomic phase
// would.
func stage(t *testing.T, pool *pgxpool.Pool, args ...river.JobArgs) {
	t.Helper()
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		var b pgx.Batch
		for _, a := range args {
			if err := jobs.Stage(&b, a); err != nil {
				return err
			}
		}
		return tx.SendBatch(t.Context(), &b).Close()
	})
	if err != nil {
		t.Fatalf("stage %d jobs: %v", len(args), err)
	}
}

// receipts returns n receipt jobs for consecutive rides. The rides need
// not exist for the enqueuer.
func receipts(firstRideID int64, n int) []river.JobArgs {
	args := make([]river.JobArgs, n)
	for i := range args {
		args[i] = jobs.ReceiptArgs{
			RideID:         firstRideID + int64(i),
			UserID:         1,
			Amount:         20_00,
			Currency:       "usd",
			StripeChargeID: "ch_test",
		}
	}
	return args
}

func countRows(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

type riverJob struct {
	Kind  string          `db:"kind"`
	Args  json.RawMessage `db:"args"`
	State string          `db:"state"`
	Queue string          `db:"queue"`
}

func riverJobs(t *testing.T, pool *pgxpool.Pool) []riverJob {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT kind, args, state::text AS state, queue FROM river_job ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByName[riverJob])
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// startRun runs e in the background and returns a function that cancels it
// and fails the test unless Run then returns promptly and cleanly.
func startRun(t *testing.T, e *jobs.Enqueuer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run = %v, want nil", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("Run did not return after its context was cancelled")
			}
		})
	}
	// Before the database is dropped.
	t.Cleanup(stop)
	return stop
}

func waitForRiverJobs(t *testing.T, pool *pgxpool.Pool, want int, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, func() bool { return countRows(t, pool, "river_job") >= want },
		"%d jobs in River", want)
}

// listenerPID waits for a backend of the test database, other than
// notPID, to LISTEN on the staged jobs channel and returns its pid.
func listenerPID(t *testing.T, pool *pgxpool.Pool, notPID int32) int32 {
	t.Helper()
	var pid int32
	eventually(t, time.Minute, func() bool {
		err := pool.QueryRow(t.Context(), `
			SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'LISTEN %' AND pid <> $1
			LIMIT 1`, notPID,
		).Scan(&pid)
		return err == nil
	}, "a connection listening for staged jobs")
	return pid
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for "+format, append([]any{timeout}, args...)...)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testLogger writes through t.Log, so a failing test shows what the code
// under test logged.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
