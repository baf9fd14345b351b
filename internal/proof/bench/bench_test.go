package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
)

func TestPercentile(t *testing.T) {
	t.Parallel()

	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}

	t.Run("NearestRank", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, 50*time.Millisecond, Percentile(hundred, 50))
		require.Equal(t, 99*time.Millisecond, Percentile(hundred, 99))
		require.Equal(t, 100*time.Millisecond, Percentile(hundred, 100))
		require.Equal(t, 1*time.Millisecond, Percentile(hundred, 0.5))
	})

	t.Run("NeverInterpolates", func(t *testing.T) {
		t.Parallel()
		two := []time.Duration{10 * time.Millisecond, 30 * time.Millisecond}
		require.Equal(t, 10*time.Millisecond, Percentile(two, 50))
		require.Equal(t, 30*time.Millisecond, Percentile(two, 51))
		require.Equal(t, 30*time.Millisecond, Percentile(two, 99))
	})

	t.Run("EmptyAndSingle", func(t *testing.T) {
		t.Parallel()
		require.Zero(t, Percentile(nil, 99))
		require.Equal(t, time.Second, Percentile([]time.Duration{time.Second}, 1))
		require.Equal(t, time.Second, Percentile([]time.Duration{time.Second}, 99))
	})
}

func TestTable(t *testing.T) {
	t.Parallel()

	t.Run("AlignsColumnsNumbersRight", func(t *testing.T) {
		t.Parallel()
		tb := Table{
			Header: []string{"step", "value", "note"},
			Rows: [][]string{
				{"new rides", "1234", "ok"},
				{"replays", "5.5", ""},
			},
		}
		require.Equal(t, ""+
			"step       value  note\n"+
			"---------  -----  ----\n"+
			"new rides   1234  ok\n"+
			"replays      5.5\n", tb.String())
	})

	t.Run("FormatsFiguresAndTargets", func(t *testing.T) {
		t.Parallel()
		met, missed := true, false
		r := &Report{
			Figures: []Figure{{Step: "2 new rides", Name: "POST /rides", Clients: 32, Value: 412.345, Unit: "rides/s",
				P50Ms: 70.5, P99Ms: 150, Ratio: 0.8, RatioOf: "pgbench 32 clients"}},
			Targets: []Target{
				{Name: "memory", Want: "<= 64 MiB", Got: "33 MiB", Met: &met},
				{Name: "hiding", Want: ">= 0.8", Got: "0.4", Met: &missed},
				{Name: "scale", Want: ">= 0.9"},
			},
		}
		figures := r.FiguresTable().String()
		require.Contains(t, figures, "412  rides/s")
		require.Contains(t, figures, "70.5     150")
		require.Contains(t, figures, "0.80")
		targets := r.TargetsTable().String()
		require.Contains(t, targets, "33 MiB  yes")
		require.Contains(t, targets, "   0.4  NO")
		require.Contains(t, targets, "not measured")
	})

	t.Run("SetsThePathsSideBySide", func(t *testing.T) {
		t.Parallel()
		r := &Report{}
		r.Paths.Fast = PathFigures{RoundTrips: 3, Statements: 16, Rate: 251, APICPUMs: 1.13}
		r.Paths.Plain = PathFigures{RoundTrips: 21, Statements: 21, Rate: 208, APICPUMs: 2.01, PostgresCPUMs: 3.31}
		paths := r.PathsTable().String()
		require.Contains(t, paths, "round trips                                            3           21          7.00")
		require.Contains(t, paths, "new rides/s, 32 clients                              251          208          0.83")
		require.Regexp(t, `Postgres CPU ms per ride  not measured +3.31\n`, paths)
		var text bytes.Buffer
		r.WriteText(&text)
		require.Contains(t, text.String(), "two paths, side by side")
	})

	t.Run("FormatFloatKeepsSignificantDigits", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "0", formatFloat(0))
		require.Equal(t, "0.05", formatFloat(0.0512))
		require.Equal(t, "12.3", formatFloat(12.34))
		require.Equal(t, "1235", formatFloat(1234.6))
	})
}

func TestParsePgbench(t *testing.T) {
	t.Parallel()

	out := `pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: /tmp/ride.sql
scaling factor: 1
query mode: prepared
number of clients: 32
number of threads: 2
maximum number of tries: 1
duration: 10 s
number of transactions actually processed: 5190
number of failed transactions: 3 (0.058%)
latency average = 61.703 ms
initial connection time = 41.532 ms
tps = 518.606203 (without initial connection time)
`
	res, err := parsePgbench(out)
	require.NoError(t, err)
	require.Equal(t, pgbenchResult{TPS: 518.606203, Processed: 5190, Failed: 3, LatencyMs: 61.703}, res)

	_, err = parsePgbench("pgbench: error: connection refused")
	require.Error(t, err)
}

func TestGeneratedKey(t *testing.T) {
	t.Parallel()

	// md5('live-x-7')::uuid::text, as the loader's SQL spells it.
	require.Equal(t, "08bd805a-4c82-6461-b654-3a7dc5117589", generatedKey("live-x-", 7))

	b := keyBatch{prefix: "p-", count: 100}
	for range 50 {
		k := b.seededKey()
		found := false
		for g := int64(1); g <= b.count; g++ {
			if generatedKey(b.prefix, g) == k {
				require.Less(t, g%5, int64(3), "a seeded key belongs to the seeded user (g %% 5 < 3)")
				found = true
			}
		}
		require.True(t, found)
	}
}

// TestRunRefusesProfile: a -profile the run could not write, or would
// never write, is refused before anything runs.
func TestRunRefusesProfile(t *testing.T) {
	t.Parallel()

	t.Run("Unwritable", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		_, err := Run(context.Background(), Config{Root: dir, Profile: filepath.Join(dir, "missing", "cpu.pprof")})
		require.ErrorContains(t, err, "-profile: open "+filepath.Join(dir, "missing", "cpu.pprof"))
		_, err = os.Stat(filepath.Join(dir, ".data"))
		require.ErrorIs(t, err, os.ErrNotExist, "nothing ran")
	})

	t.Run("ADirectory", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		profile := filepath.Join(dir, "profiles")
		require.NoError(t, os.Mkdir(profile, 0o755))
		_, err := Run(context.Background(), Config{Root: dir, Profile: profile})
		require.EqualError(t, err, "-profile: open "+profile+": is a directory")
		_, err = os.Stat(filepath.Join(dir, ".data"))
		require.ErrorIs(t, err, os.ErrNotExist, "nothing ran")
	})

	t.Run("WithoutTheNewStep", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		profile := filepath.Join(dir, "cpu.pprof")
		_, err := Run(context.Background(), Config{Root: dir, Profile: profile, Only: []string{"limit", "replay"}})
		require.ErrorContains(t, err, "-profile profiles the api over the new step, which -only leaves out")
		_, err = os.Stat(profile)
		require.ErrorIs(t, err, os.ErrNotExist, "no empty profile left behind")
	})

	t.Run("LeavesAnEarlierProfileAlone", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		profile := filepath.Join(dir, "cpu.pprof")
		require.NoError(t, os.WriteFile(profile, []byte("an earlier profile"), 0o644))
		// Another run holds the bench's data directory: this one stops
		// past its checks, before it builds or starts anything.
		dataDir := filepath.Join(dir, ".data", "bench")
		require.NoError(t, os.MkdirAll(dataDir, 0o755))
		lock, err := os.Create(filepath.Join(dataDir, "run.lock"))
		require.NoError(t, err)
		t.Cleanup(func() { lock.Close() })
		require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB))
		_, err = Run(context.Background(), Config{Root: dir, Profile: profile, Only: []string{"new"}})
		require.EqualError(t, err, "another bench run holds "+lock.Name())
		b, err := os.ReadFile(profile)
		require.NoError(t, err)
		require.Equal(t, "an earlier profile", string(b))
		left, err := filepath.Glob(filepath.Join(dir, ".cpu.pprof-*"))
		require.NoError(t, err)
		require.Empty(t, left, "no trial file left beside it")
	})
}

// TestRunRefusesJSON: a -json the run could not write is refused before
// anything runs, not once the figures are in.
func TestRunRefusesJSON(t *testing.T) {
	t.Parallel()

	t.Run("Unwritable", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "missing", "results.json")
		_, err := Run(context.Background(), Config{Root: dir, JSON: path})
		require.EqualError(t, err, "-json: open "+path+": no such file or directory")
		_, err = os.Stat(filepath.Join(dir, ".data"))
		require.ErrorIs(t, err, os.ErrNotExist, "nothing ran")
	})

	t.Run("ADirectory", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		_, err := Run(context.Background(), Config{Root: dir, JSON: dir})
		require.EqualError(t, err, "-json: open "+dir+": is a directory")
		_, err = os.Stat(filepath.Join(dir, ".data"))
		require.ErrorIs(t, err, os.ErrNotExist, "nothing ran")
	})
}

// TestUnderProfile: the profile of the api lasts as long as the load it
// profiles, and no longer when the load fails.
func TestUnderProfile(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		run     *run
		profile string
	}
	// setup serves profiles as pprof does: the answer comes once the
	// profile's duration is over.
	setup := func(t *testing.T, d time.Duration) testBundle {
		t.Helper()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			select {
			case <-time.After(d):
				_, _ = w.Write([]byte("a profile"))
			case <-req.Context().Done():
			}
		}))
		t.Cleanup(srv.Close)
		profile := filepath.Join(t.TempDir(), "cpu.pprof")
		return testBundle{run: &run{cfg: Config{Profile: profile, Log: t.Output()}, start: time.Now(), debugAddr: strings.TrimPrefix(srv.URL, "http://")}, profile: profile}
	}

	t.Run("WritesTheProfileOfALoad", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 100*time.Millisecond)
		res, err := b.run.underProfile(context.Background(), time.Second, func() (LoadResult, error) {
			return LoadResult{OK: 1}, nil
		})
		require.NoError(t, err)
		require.Equal(t, 1, res.OK)
		data, err := os.ReadFile(b.profile)
		require.NoError(t, err)
		require.Equal(t, "a profile", string(data))
	})

	t.Run("EndsTheProfileWhenTheLoadFails", func(t *testing.T) {
		t.Parallel()
		b := setup(t, time.Minute)
		begin := time.Now()
		_, err := b.run.underProfile(context.Background(), time.Minute, func() (LoadResult, error) {
			return LoadResult{}, errors.New("the load failed")
		})
		require.EqualError(t, err, "the load failed")
		require.Less(t, time.Since(begin), 10*time.Second, "the profile's minute was not waited out")
		_, err = os.Stat(b.profile)
		require.ErrorIs(t, err, os.ErrNotExist, "no profile written")
		left, err := filepath.Glob(filepath.Join(filepath.Dir(b.profile), ".cpu.pprof-*"))
		require.NoError(t, err)
		require.Empty(t, left, "no trial file left beside it")
	})
}

// TestProcCPU: the CPU of a child that exited and was waited for stays
// in its parent's count, so that a Postgres backend closing during a load
// does not take its CPU out of the cluster's total.
func TestProcCPU(t *testing.T) {
	t.Parallel()
	_, _, before := procCPU(os.Getpid())
	burn := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	require.NoError(t, burn.Run())
	_, _, after := procCPU(os.Getpid())
	require.Greater(t, after, before, "the child's CPU, counted once it was reaped")
}

// TestCPUFigures: what a ride cost each process, and the api's CPU over
// the Stripe fake's, by which runs on a machine of drifting speed compare.
func TestCPUFigures(t *testing.T) {
	t.Parallel()
	r := &run{cfg: Config{Log: t.Output()}, start: time.Now(), report: &Report{}}
	before := cpuUse{rides: 100}
	after := cpuUse{apiUser: 40 * time.Millisecond, apiSystem: 20 * time.Millisecond, postgres: 120 * time.Millisecond,
		fake: 20 * time.Millisecond, load: 10 * time.Millisecond, rides: 200}
	require.NoError(t, r.cpuFigures(before, after))
	byName := map[string]Figure{}
	for _, f := range r.report.Figures {
		byName[f.Name] = f
	}
	require.InDelta(t, 0.6, byName["api CPU per new ride"].Value, 1e-9)
	require.Contains(t, byName["api CPU per new ride"].Note, "3.00 x the Stripe fake's")
	require.InDelta(t, 1.2, byName["Postgres CPU per new ride"].Value, 1e-9)
	require.InDelta(t, 2.1, byName["every process's CPU per new ride"].Value, 1e-9)
	require.Error(t, r.cpuFigures(after, after), "no rides between the samples")
}

// TestNewRidesAgainstTheCeiling: new rides are held to the limit step's
// best pgbench rate, and shown beside pgbench at 32 clients and beside the
// ceiling taken again just before them, which a verdict does not use.
func TestNewRidesAgainstTheCeiling(t *testing.T) {
	t.Parallel()
	r := &run{report: &Report{}, bestAt: 8, limit: map[int]float64{8: 1000, 32: 900}, limitNear: 800,
		newRides: map[int]LoadResult{32: {Rate: 600}}}
	r.targets()
	var got Target
	for _, target := range r.report.Targets {
		if strings.HasPrefix(target.Name, "new rides/s at 32 clients vs own-SQL ceiling") {
			got = target
		}
	}
	require.Equal(t, "600 / 1000 (best pgbench, 8 clients) = 0.60; vs pgbench at 32 clients 900: 0.67; vs the same pgbench just before them 800: 0.75", got.Got)
	require.NotNil(t, got.Met)
	require.False(t, *got.Met, "held to the limit step's best")
}

// TestAPICPUAgainstItsReferences: the api's CPU per ride is judged
// against its target alone, and shown beside the minimal design's api and
// the I/O floor wherever those were measured.
func TestAPICPUAgainstItsReferences(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		minimalAPI, floor time.Duration
		want              string
	}{
		{620 * time.Microsecond, 300 * time.Microsecond, "0.79 ms (minimal design's api 0.62, I/O alone 0.30)"},
		{0, 300 * time.Microsecond, "0.79 ms (I/O alone 0.30)"},
		{0, 0, "0.79 ms"},
	} {
		r := &run{report: &Report{}, apiCPU: 790 * time.Microsecond, minimalAPICPU: c.minimalAPI, floorCPU: c.floor}
		r.targets()
		i := slices.IndexFunc(r.report.Targets, func(t Target) bool { return t.Name == "api CPU per new ride at 32 clients" })
		require.GreaterOrEqual(t, i, 0)
		require.Equal(t, c.want, r.report.Targets[i].Got)
		require.False(t, *r.report.Targets[i].Met)
	}
}

func TestCount(t *testing.T) {
	t.Parallel()
	require.Equal(t, "5M", count(5_000_000))
	require.Equal(t, "1.5M", count(1_500_000))
	require.Equal(t, "100k", count(100_000))
	require.Equal(t, "999", count(999))
}

func TestLoad(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		server   *httptest.Server
		requests *atomic.Int64
	}
	setup := func(t *testing.T, handler func(n int64, w http.ResponseWriter)) testBundle {
		t.Helper()
		var requests atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			handler(requests.Add(1), w)
		}))
		t.Cleanup(srv.Close)
		return testBundle{server: srv, requests: &requests}
	}
	load := func(b testBundle) Load {
		return Load{
			Clients: 4, Warmup: 50 * time.Millisecond, Duration: 300 * time.Millisecond,
			Request: func(c, n int) (*http.Request, error) {
				return newRide(b.server.URL, fmt.Sprintf("key-%d-%d", c, n))
			},
			Check: created,
		}
	}

	t.Run("MeasuresSuccessesAfterWarmup", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, func(_ int64, w http.ResponseWriter) {
			time.Sleep(2 * time.Millisecond)
			w.WriteHeader(http.StatusCreated)
		})
		res, err := load(bundle).Run(context.Background())
		require.NoError(t, err)
		require.Zero(t, res.Errors)
		require.Positive(t, res.OK)
		require.Less(t, int64(res.OK), bundle.requests.Load(), "warm-up requests are not counted")
		require.InDelta(t, float64(res.OK)/res.Elapsed.Seconds(), res.Rate, 0.001)
		require.GreaterOrEqual(t, res.P50, 2*time.Millisecond)
		require.GreaterOrEqual(t, res.P99, res.P50)
	})

	t.Run("CountsErrorsByProblemCode", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, func(n int64, w http.ResponseWriter) {
			if n%2 == 0 {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(`{"code": "payment_unavailable"}`))
				return
			}
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusCreated)
		})
		res, err := load(bundle).Run(context.Background())
		require.NoError(t, err)
		require.Zero(t, res.OK, "a replay is not a new ride")
		require.Positive(t, res.ErrorKinds["HTTP 503 payment_unavailable"])
		require.Positive(t, res.ErrorKinds["replayed instead of created"])
		require.Contains(t, errorNote(res.ErrorKinds), "x")
	})

	// Paced, a load never sends faster than its rate, however fast the
	// server answers (a slow machine sends fewer, never more).
	t.Run("PacesToItsRate", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, func(_ int64, w http.ResponseWriter) { w.WriteHeader(http.StatusCreated) })
		l := load(bundle)
		l.Rate = 40
		res, err := l.Run(context.Background())
		require.NoError(t, err)
		require.Positive(t, res.OK)
		// 40/s over 350 ms is 14 requests, one more per client at most
		// for a client whose last request began just before the end.
		require.LessOrEqual(t, bundle.requests.Load(), int64(14+l.Clients))
	})

	t.Run("StopsEarly", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, func(_ int64, w http.ResponseWriter) { w.WriteHeader(http.StatusCreated) })
		stop := make(chan struct{})
		l := load(bundle)
		l.Warmup, l.Duration, l.Stop = 0, time.Minute, stop
		time.AfterFunc(100*time.Millisecond, func() { close(stop) })
		begin := time.Now()
		res, err := l.Run(context.Background())
		require.NoError(t, err)
		// Well short of the minute: stopped, however slow the machine.
		require.Less(t, time.Since(begin), 30*time.Second)
		require.Less(t, res.Elapsed, 30*time.Second)
		require.Positive(t, res.OK)
	})
}

// TestRideScript captures real rides and runs the pgbench script made
// from them against the migrated schema: the ceiling the bench measures
// must be the api's own work, statement for statement and round trip for
// round trip, and must leave the rows the api's rides leave. A phase that
// changes is captured as it now is; one the script generator cannot
// reproduce fails here.
func TestRideScript(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	cluster, err := localpg.New(localpg.Options{})
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(cluster.BinDir, "pgbench")); err != nil {
		t.Skipf("no pgbench next to the server binaries: %v", err)
	}

	type testBundle struct {
		capture *capture
		conn    *pgx.Conn // the captured rides' database
	}
	setup := func(t *testing.T) testBundle {
		t.Helper()
		url := dbtest.NewURL(t)
		c, err := captureRides(ctx, url, false)
		require.NoError(t, err)
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close(context.Background()) })
		return testBundle{capture: c, conn: conn}
	}

	t.Run("SendsEveryCapturedStatementInItsRoundTrip", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		script, _ := b.capture.script(b.capture.ride)
		rest := script
		pipelines := 0
		for i, s := range b.capture.ride {
			if s.pipeline && (i == 0 || b.capture.ride[i-1].trip != s.trip) {
				pipelines++
				i := strings.Index(rest, "\\startpipeline\n")
				require.GreaterOrEqual(t, i, 0, "a pipeline missing in:\n%s", script)
				rest = rest[i:]
			}
			for _, fragment := range placeholder.Split(s.sql, -1) {
				fragment = strings.TrimSpace(fragment)
				i := strings.Index(rest, fragment)
				require.GreaterOrEqual(t, i, 0, "%q of %q missing, or out of order, in:\n%s", fragment, s.sql, script)
				rest = rest[i+len(fragment):]
			}
		}
		require.Positive(t, pipelines, "each atomic phase is pipelined")
		require.Equal(t, pipelines, strings.Count(script, "\\startpipeline"))
		require.Equal(t, pipelines, strings.Count(script, "\\endpipeline"))
	})

	// What a new ride costs on the wire, as the api sends it: the claim,
	// with the check that the token's remembered user still holds it
	// ahead of it; the ride phase; then recording the charge and
	// finishing, two transactions in one pipeline. A replay is the claim's
	// round trip alone.
	t.Run("NewRideRoundTrips", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Equal(t, 3, b.capture.roundTrips(), "round trips of a new ride, the token's check included")
		require.Equal(t, 1, len(slices.CompactFunc(slices.Clone(b.capture.replay), func(a, b statement) bool { return a.trip == b.trip })),
			"round trips of a replay")
		commits := 0
		for _, s := range b.capture.ride {
			if strings.TrimSpace(s.sql) == "COMMIT" {
				commits++
			}
		}
		require.Equal(t, 3, commits, "every atomic phase after the claim commits on its own")
		// The check and the claim; each phase's BEGIN, its move (which is
		// its fence), its writes (the ride and its audit record; the
		// charge; the receipt's job) and COMMIT; the enqueuer's wake.
		require.Len(t, b.capture.ride, 2+5+4+4+1, "statements of a new ride")
	})

	// The same ride on the key store's plain path: each statement a round
	// trip of its own, in the order the first reading shows them.
	t.Run("PlainPathSendsEachStatementOnItsOwn", func(t *testing.T) {
		t.Parallel()
		c, err := captureRides(ctx, dbtest.NewURL(t), true)
		require.NoError(t, err)
		var sent []string
		for _, s := range c.ride {
			require.False(t, s.pipeline, "nothing pipelined: %s", s.sql)
			sent = append(sent, strings.Fields(s.sql)[0])
		}
		require.Equal(t, len(c.ride), c.roundTrips())
		require.Equal(t, []string{
			"begin", "SELECT", "INSERT", "commit", // the claim: the token's check, then the key
			"begin", "UPDATE", "UPDATE", "INSERT", "INSERT", "commit", // the fence, the move, the ride, its audit record
			"begin", "UPDATE", "UPDATE", "WITH", "commit", // the fence, the move, the charge
			"begin", "UPDATE", "UPDATE", "INSERT", "commit", // the fence, the finish, the receipt's job
			"SELECT", // the enqueuer's wake, once committed
		}, sent)
	})

	t.Run("LeavesTheRowsTheApiLeaves", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		url := dbtest.NewURL(t)
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close(context.Background()) })
		uid, err := b.capture.addUser(ctx, conn)
		require.NoError(t, err)
		before := rowCounts(t, conn)

		out, err := b.capture.pgbench(ctx, cluster, url, filepath.Join(t.TempDir(), "ride.sql"), b.capture.ride, uid, nil,
			"-D", "run=test", "-c", "2", "-t", "5")
		require.NoError(t, err)
		res, err := parsePgbench(out)
		require.NoError(t, err)
		require.Equal(t, [2]int64{10, 0}, [2]int64{res.Processed, res.Failed})

		// Ten rides by pgbench leave five times the rows, and the non-NULL
		// values in each column, that the two captured rides left.
		after, captured := rowCounts(t, conn), rowCounts(t, b.conn)
		require.Positive(t, captured["idempotency_keys.*"]-before["idempotency_keys.*"])
		for k := range captured {
			require.Equal(t, 5*(captured[k]-before[k]), after[k]-before[k], k)
		}
	})

	// The minimal design's script, the reference the api's own SQL is
	// held to, makes whole rides: each key finished, with its ride
	// charged, its audit record and its staged job.
	t.Run("MinimalDesignFinishesEachRide", func(t *testing.T) {
		t.Parallel()
		url := dbtest.NewURL(t)
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close(context.Background()) })
		_, err = conn.Exec(ctx, "DROP SCHEMA public CASCADE; CREATE SCHEMA public;"+minimalSchema)
		require.NoError(t, err)
		var uid int64
		require.NoError(t, conn.QueryRow(ctx, `SELECT id FROM users`).Scan(&uid))
		out, err := runPgbench(ctx, cluster, url, filepath.Join(t.TempDir(), "minimal.sql"), minimalScript, nil, uid, nil,
			"-D", "run=test", "-c", "2", "-t", "5")
		require.NoError(t, err)
		res, err := parsePgbench(out)
		require.NoError(t, err)
		require.Equal(t, [2]int64{10, 0}, [2]int64{res.Processed, res.Failed})
		var finished, charged, audits, jobs int64
		require.NoError(t, conn.QueryRow(ctx, `
			SELECT (SELECT count(*) FROM idempotency_keys WHERE recovery_point = 'finished' AND response_code = 201 AND locked_at IS NULL),
			       (SELECT count(*) FROM rides r JOIN idempotency_keys k ON k.id = r.idempotency_key_id WHERE r.stripe_charge_id IS NOT NULL),
			       (SELECT count(*) FROM audit_records a JOIN rides r ON r.id = a.resource_id),
			       (SELECT count(*) FROM staged_jobs)`).Scan(&finished, &charged, &audits, &jobs))
		require.Equal(t, []int64{10, 10, 10, 10}, []int64{finished, charged, audits, jobs})
		require.Equal(t, 3, strings.Count(minimalScript, "\\startpipeline")+countPlain(minimalScript),
			"the minimal design's round trips: the key, the ride, the charge and the finish")
	})

	t.Run("BenchHoldsNoCopyOfTheStatements", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var source strings.Builder
		for _, dir := range []string{".", "../../../cmd/bench"} {
			files, err := filepath.Glob(filepath.Join(dir, "*.go"))
			require.NoError(t, err)
			for _, f := range files {
				if !strings.HasSuffix(f, "_test.go") {
					data, err := os.ReadFile(f)
					require.NoError(t, err)
					source.WriteString(strings.Join(strings.Fields(string(data)), " "))
				}
			}
		}
		for _, s := range slices.Concat(b.capture.ride, b.capture.replay) {
			for _, fragment := range placeholder.Split(s.sql, -1) {
				if fragment = strings.Join(strings.Fields(fragment), " "); len(fragment) >= 30 {
					require.NotContains(t, source.String(), fragment, "a copy of part of %q", s.sql)
				}
			}
		}
	})
}

// rowCounts counts, in every table, the rows ("table.*") and the values
// that are not NULL in each column ("table.column").
func rowCounts(t *testing.T, conn *pgx.Conn) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	rows, _ := conn.Query(ctx, `
		SELECT table_name, array_agg(column_name::text ORDER BY ordinal_position)
		FROM information_schema.columns WHERE table_schema = 'public' GROUP BY table_name`)
	tables, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		Table   string
		Columns []string
	}])
	require.NoError(t, err)
	counts := map[string]int64{}
	for _, tb := range tables {
		exprs := []string{"count(*)"}
		for _, c := range tb.Columns {
			exprs = append(exprs, fmt.Sprintf("count(%s)", pgx.Identifier{c}.Sanitize()))
		}
		values := make([]int64, len(exprs))
		dest := make([]any, len(exprs))
		for i := range values {
			dest[i] = &values[i]
		}
		require.NoError(t, conn.QueryRow(ctx, "SELECT "+strings.Join(exprs, ", ")+" FROM "+pgx.Identifier{tb.Table}.Sanitize()).Scan(dest...))
		for i, name := range append([]string{"*"}, tb.Columns...) {
			counts[tb.Table+"."+name] = values[i]
		}
	}
	return counts
}

// TestRidesOfKeys holds the scale step's rides to the schema: each old
// key gets the paid ride the api would have left, recent keys none.
func TestRidesOfKeys(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.New(t)
	_, err := pool.Exec(ctx, `
		INSERT INTO users (id, email, stripe_customer_id, api_token_hash)
		VALUES (1, 'scale@example.com', 'cus_scale', sha256('t'));
		INSERT INTO idempotency_keys (user_id, idempotency_key, created_at, request_method, request_path,
		                              request_params, origin_ip, recovery_point, locked_at, response_code, response_body)
		SELECT 1, 'key-' || d, now() - (d || ' days')::interval, 'POST', '/rides', '{}', '127.0.0.1',
		       'finished', NULL, 201, '{}'
		FROM unnest(ARRAY[1, 2, 4, 5, 6]) AS d`)
	require.NoError(t, err)

	require.NoError(t, insertRidesOfKeys(ctx, pool, 72*time.Hour))
	var rides, paid int
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE status = 'succeeded' AND stripe_charge_id IS NOT NULL)
		FROM rides`).Scan(&rides, &paid))
	require.Equal(t, 3, rides, "keys of 4, 5 and 6 days ago")
	require.Equal(t, 3, paid)
}
