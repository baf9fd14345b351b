package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/user"
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

	t.Run("SummarizeSortsAndAverages", func(t *testing.T) {
		t.Parallel()
		shuffled := []time.Duration{5, 1, 4, 2, 3}
		s := Summarize(shuffled)
		require.Equal(t, Summary{Count: 5, Mean: 3, P50: 3, P90: 5, P99: 5, Max: 5}, s)
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

	b := keyBatch{prefix: "p-", first: 1, count: 100}
	for range 50 {
		k := b.seededKey()
		found := false
		for g := b.first; g < b.first+b.count; g++ {
			if generatedKey(b.prefix, g) == k {
				require.Less(t, g%5, int64(3), "a seeded key belongs to the seeded user (g %% 5 < 3)")
				found = true
			}
		}
		require.True(t, found)
	}
}

func TestCount(t *testing.T) {
	t.Parallel()
	require.Equal(t, "5M", count(5_000_000))
	require.Equal(t, "1.5M", count(1_500_000))
	require.Equal(t, "100k", count(100_000))
	require.Equal(t, "999", count(999))
}

func TestWithoutNotify(t *testing.T) {
	t.Parallel()
	require.Contains(t, rideScript, "pg_notify(")
	for _, script := range []string{rideScript} {
		stripped := withoutNotify(script)
		require.NotContains(t, stripped, "pg_notify(")
		require.Contains(t, stripped, "SELECT id FROM staged;")
		require.Equal(t, strings.Count(script, "\n"), strings.Count(stripped, "\n"))
	}
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
		var successes atomic.Int64
		l := load(bundle)
		l.OnSuccess = func(int, int) { successes.Add(1) }
		res, err := l.Run(context.Background())
		require.NoError(t, err)
		require.Zero(t, res.Errors)
		require.Positive(t, res.OK)
		require.Less(t, int64(res.OK), bundle.requests.Load(), "warm-up requests are not counted")
		require.Equal(t, int64(res.Total), successes.Load())
		require.InDelta(t, float64(res.OK)/res.Elapsed.Seconds(), res.Rate, 0.001)
		require.GreaterOrEqual(t, res.Latency.P50, 2*time.Millisecond)
		require.GreaterOrEqual(t, res.Latency.P99, res.Latency.P50)
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
		require.Less(t, time.Since(begin), 10*time.Second)
		require.Less(t, res.Elapsed, time.Second)
		require.Positive(t, res.OK)
	})
}

// TestRideScript runs ride.sql through pgbench against the real schema:
// when a migration or the ride's SQL changes, the limit the bench
// measures must still be the same work, ending where the api's rides end.
func TestRideScript(t *testing.T) {
	t.Parallel()

	cluster, err := localpg.New(localpg.Options{})
	require.NoError(t, err)
	bin := filepath.Join(cluster.BinDir, "pgbench")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no pgbench next to the server binaries: %v", err)
	}

	for _, tc := range []struct{ name, script string }{
		{"RideSQL", rideScript},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := dbtest.NewURL(t)
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, url)
			require.NoError(t, err)
			t.Cleanup(func() { conn.Close(context.Background()) })
			var uid int64
			require.NoError(t, conn.QueryRow(ctx, `
				INSERT INTO users (email, stripe_customer_id, api_token_hash)
				VALUES ('pgbench@example.com', 'cus_pgbench', $1) RETURNING id`,
				user.HashToken(pgbenchToken)).Scan(&uid))

			script := filepath.Join(t.TempDir(), "ride.sql")
			require.NoError(t, os.WriteFile(script, []byte(tc.script), 0o644))
			args := []string{"-n", "-M", "prepared", "-f", script, "-c", "2", "-t", "5"}
			for _, d := range limitDefines(uid, "test") {
				args = append(args, "-D", d)
			}
			out, err := exec.CommandContext(ctx, bin, append(args, url)...).CombinedOutput()
			require.NoError(t, err, string(out))
			res, err := parsePgbench(string(out))
			require.NoError(t, err, string(out))
			require.Equal(t, pgbenchResult{Processed: 10, Failed: 0}, pgbenchResult{Processed: res.Processed, Failed: res.Failed})

			var finished, charged, staged int
			require.NoError(t, conn.QueryRow(ctx, `
				SELECT (SELECT count(*) FROM idempotency_keys WHERE recovery_point = 'finished' AND response_code = 201
				                                             AND locked_at IS NULL AND first_foreign_attempt_at IS NOT NULL),
				       (SELECT count(*) FROM rides WHERE stripe_charge_id IS NOT NULL),
				       (SELECT count(*) FROM staged_jobs)`).Scan(&finished, &charged, &staged))
			require.Equal(t, []int{10, 10, 10}, []int{finished, charged, staged})

			// The replay scripts read the keys the ride script finished.
			var minID, maxID int64
			require.NoError(t, conn.QueryRow(ctx, `SELECT min(id), max(id) FROM idempotency_keys`).Scan(&minID, &maxID))
			for _, replay := range []string{replayScript, replayLockingScript} {
				require.NoError(t, os.WriteFile(script, []byte(replay), 0o644))
				replayArgs := slices.Concat(args, []string{"-D", fmt.Sprintf("minid=%d", minID), "-D", fmt.Sprintf("maxid=%d", maxID), url})
				out, err := exec.CommandContext(ctx, bin, replayArgs...).CombinedOutput()
				require.NoError(t, err, string(out))
				res, err := parsePgbench(string(out))
				require.NoError(t, err, string(out))
				require.Equal(t, int64(10), res.Processed, string(out))
			}
			var keys int
			require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&keys))
			require.Equal(t, 10, keys, "a replay adds no key")
		})
	}
}
