package bench

import (
	"context"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/user"
)

// rideScript is one ride's database work as a pgbench script.
//
//go:embed ride.sql
var rideScript string

// pgbenchToken is the API token of the user pgbench's rides belong to.
const pgbenchToken = "rr_bench_token_pgbench_0123456789"

// pgbenchResult is what pgbench reported.
type pgbenchResult struct {
	TPS       float64
	Processed int64
	Failed    int64
	LatencyMs float64
	// ClientCPU is the CPU time pgbench itself used.
	ClientCPU time.Duration
}

var (
	tpsRe       = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)
	processedRe = regexp.MustCompile(`(?m)^number of transactions actually processed: (\d+)`)
	failedRe    = regexp.MustCompile(`(?m)^number of failed transactions: (\d+)`)
	latencyRe   = regexp.MustCompile(`(?m)^latency average = ([0-9.]+) ms`)
)

// parsePgbench reads pgbench's summary.
func parsePgbench(out string) (pgbenchResult, error) {
	var res pgbenchResult
	m := tpsRe.FindStringSubmatch(out)
	if m == nil {
		return res, fmt.Errorf("no tps in pgbench output:\n%s", lastLines(out, 20))
	}
	res.TPS, _ = strconv.ParseFloat(m[1], 64)
	if m := processedRe.FindStringSubmatch(out); m != nil {
		res.Processed, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := failedRe.FindStringSubmatch(out); m != nil {
		res.Failed, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := latencyRe.FindStringSubmatch(out); m != nil {
		res.LatencyMs, _ = strconv.ParseFloat(m[1], 64)
	}
	return res, nil
}

// pgbenchBin finds pgbench next to the cluster's server binaries.
func pgbenchBin(c localpg.Cluster) string {
	if p := filepath.Join(c.BinDir, "pgbench"); fileExists(p) {
		return p
	}
	return "pgbench"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// limitDefines are the -D variables ride.sql and its variants read.
func limitDefines(uid int64, run string) []string {
	body := `{"id": 1, "amount": 2000, "currency": "usd", "created_at": "2025-01-01T12:00:00.000000Z", ` +
		`"origin_lat": 37.7749, "origin_lon": -122.4194, "target_lat": 37.8044, "target_lon": -122.2712, ` +
		`"stripe_charge_id": "ch_pgbench_0000000000000000"}`
	jobArgs := fmt.Sprintf(`{"ride_id": 1, "user_id": %d, "amount": 2000, "currency": "usd", `+
		`"stripe_charge_id": "ch_pgbench_0000000000000000"}`, uid)
	return []string{
		"uid=" + strconv.FormatInt(uid, 10),
		"run=" + run,
		"n=0",
		"token_hex=" + hex.EncodeToString(user.HashToken(pgbenchToken)),
		"params=" + string(rideParams.Canonical()),
		"job_args=" + jobArgs,
		"body=" + body,
	}
}

// pgbench runs script (a file) against db with clients for d.
func (r *run) pgbench(ctx context.Context, db, script string, clients int, d time.Duration, defines []string) (pgbenchResult, error) {
	args := []string{
		"-h", "127.0.0.1", "-p", strconv.Itoa(r.cluster.Port), "-U", localpg.Superuser,
		"-n", "-M", "prepared", "-f", script,
		"-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 2)), "-T", strconv.Itoa(max(1, int(d.Seconds()))),
	}
	for _, def := range defines {
		args = append(args, "-D", def)
	}
	args = append(args, db)
	cmd := exec.CommandContext(ctx, pgbenchBin(r.cluster), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return pgbenchResult{}, fmt.Errorf("pgbench -c %d -f %s: %w:\n%s", clients, filepath.Base(script), err, lastLines(string(out), 20))
	}
	res, err := parsePgbench(string(out))
	res.ClientCPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return res, err
}

// limitDatabase creates db afresh, migrated, with the user pgbench's
// rides belong to, and returns that user's id.
func (r *run) limitDatabase(ctx context.Context, db string) (int64, error) {
	if db != limitDB {
		conn, err := pgx.Connect(ctx, r.benchURL("postgres"))
		if err != nil {
			return 0, err
		}
		ident := pgx.Identifier{db}.Sanitize()
		_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)")
		if err == nil {
			_, err = conn.Exec(ctx, "CREATE DATABASE "+ident)
		}
		conn.Close(context.WithoutCancel(ctx))
		if err != nil {
			return 0, fmt.Errorf("create database %s: %w", db, err)
		}
	}
	if err := r.migrate(ctx, db); err != nil {
		return 0, err
	}
	conn, err := pgx.Connect(ctx, r.benchURL(db))
	if err != nil {
		return 0, fmt.Errorf("connect to %s: %w", db, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var uid int64
	if err := conn.QueryRow(ctx, `
		INSERT INTO users (email, stripe_customer_id, api_token_hash)
		VALUES ('pgbench@example.com', 'cus_pgbench', $1)
		RETURNING id`, user.HashToken(pgbenchToken)).Scan(&uid); err != nil {
		return 0, fmt.Errorf("create pgbench user: %w", err)
	}
	return uid, nil
}

// writeScript writes an embedded script where pgbench can read it.
func (r *run) writeScript(name, text string) (string, error) {
	path := filepath.Join(r.cfg.DataDir, name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return "", fmt.Errorf("write pgbench script %s: %w", name, err)
	}
	return path, nil
}

// stepLimit measures the physical ceiling: pgbench running ride.sql
// against a freshly migrated database.
func (r *run) stepLimit(ctx context.Context) error {
	uid, err := r.limitDatabase(ctx, limitDB)
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, r.benchURL(limitDB))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", limitDB, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	script, err := r.writeScript("ride.sql", rideScript)
	if err != nil {
		return err
	}
	for i, clients := range r.sz.pgbenchClients {
		d := r.sz.short
		if clients == 32 {
			d = r.sz.step
		}
		before, err := readPosition(ctx, conn)
		if err != nil {
			return err
		}
		var sampler *waitSampler
		if clients == 32 {
			sampler = startWaitSampler(ctx, r.benchURL(limitDB), limitDB)
		}
		meter := r.cpuMeter(nil)
		begin := time.Now()
		res, err := r.pgbench(ctx, limitDB, script, clients, d, limitDefines(uid, fmt.Sprintf("%s%d", r.runID, i)))
		elapsed := time.Since(begin)
		if sampler != nil {
			r.report.Findings.WaitEvents = append(r.report.Findings.WaitEvents,
				WaitEvents{Source: "pgbench, 32 clients", Counts: sampler.stop()})
		}
		if err != nil {
			return err
		}
		if clients == 32 {
			after, err := readPosition(ctx, conn)
			if err != nil {
				return err
			}
			r.report.Findings.PerRide = append(r.report.Findings.PerRide, after.perRide("pgbench, 32 clients", before, res.Processed))
		}
		r.report.Findings.CPU = append(r.report.Findings.CPU, meter.perRequest(
			fmt.Sprintf("pgbench, %d clients", clients), res.Processed, elapsed,
			map[string]time.Duration{"pgbench": res.ClientCPU}))
		r.limit[clients] = res.TPS
		note := fmt.Sprintf("latency avg %.1f ms", res.LatencyMs)
		if clients == r.report.Machine.APIPoolSize {
			note += "; the api's pool size"
		}
		r.add(Figure{Step: "1 limit (pgbench)", Name: "one ride's SQL", Clients: clients, Value: res.TPS, Unit: "rides/s",
			Errors: int(res.Failed), Note: note})
	}
	return nil
}

// position is where the database's real-time counters stand.
type position struct {
	at      time.Time
	lsn     int64 // WAL bytes since the cluster began
	nextXID int64
}

func readPosition(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (position, error) {
	p := position{at: time.Now()}
	// pg_snapshot_xmax of a fresh snapshot is the next transaction id,
	// read without taking one.
	err := q.QueryRow(ctx, `
		SELECT pg_current_wal_lsn() - '0/0'::pg_lsn,
		       pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&p.lsn, &p.nextXID)
	if err != nil {
		return p, fmt.Errorf("read WAL position: %w", err)
	}
	return p, nil
}

func (p position) perRide(source string, before position, requests int64) PerRide {
	if requests <= 0 {
		return PerRide{Source: source}
	}
	return PerRide{
		Source:     source,
		Requests:   requests,
		WriteXacts: float64(p.nextXID-before.nextXID) / float64(requests),
		WALBytes:   float64(p.lsn-before.lsn) / float64(requests),
	}
}

// measured runs l and records the database's work per successful request
// under source.
func (r *run) measured(ctx context.Context, source string, l Load) (LoadResult, error) {
	before, err := readPosition(ctx, r.db)
	if err != nil {
		return LoadResult{}, err
	}
	res, err := l.Run(ctx)
	if err != nil {
		return res, err
	}
	after, err := readPosition(ctx, r.db)
	if err != nil {
		return res, err
	}
	r.report.Findings.PerRide = append(r.report.Findings.PerRide, after.perRide(source, before, int64(res.Total)))
	return res, nil
}

// waitSampler samples what a database's client sessions are doing.
type waitSampler struct {
	done   chan struct{}
	result chan []Count
}

func startWaitSampler(ctx context.Context, url, db string) *waitSampler {
	s := &waitSampler{done: make(chan struct{}), result: make(chan []Count, 1)}
	go func() {
		counts := map[string]int{}
		total := 0
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			defer conn.Close(context.WithoutCancel(ctx))
			ticker := time.NewTicker(20 * time.Millisecond)
			defer ticker.Stop()
		loop:
			for {
				select {
				case <-s.done:
					break loop
				case <-ticker.C:
				}
				rows, err := conn.Query(ctx, `
					SELECT CASE
					         WHEN state = 'active' AND wait_event IS NULL THEN 'active: on CPU'
					         WHEN state = 'active' THEN 'active: ' || wait_event_type || ' ' || wait_event
					         WHEN state = 'idle' THEN 'idle (waiting for the client)'
					         WHEN state = 'idle in transaction' THEN 'idle in transaction (client between statements)'
					         ELSE coalesce(state, 'unknown')
					       END
					FROM pg_stat_activity
					WHERE datname = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()
					  AND application_name <> $2`, db, benchApp)
				if err != nil {
					break
				}
				labels, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					break
				}
				for _, l := range labels {
					counts[l]++
					total++
				}
			}
		}
		var out []Count
		for l, n := range counts {
			out = append(out, Count{Label: l, N: n, Share: float64(n) / float64(max(total, 1))})
		}
		sortCounts(out)
		s.result <- out
	}()
	return s
}

func (s *waitSampler) stop() []Count {
	close(s.done)
	return <-s.result
}

func sortCounts(cs []Count) {
	slices.SortFunc(cs, func(a, b Count) int {
		if a.N != b.N {
			return b.N - a.N
		}
		return strings.Compare(a.Label, b.Label)
	})
}
