package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/user"
)

// pgbenchResult is what pgbench reported.
type pgbenchResult struct {
	TPS, LatencyMs    float64
	Processed, Failed int64
}

var pgbenchRe = regexp.MustCompile(`(?m)^(tps|number of transactions actually processed|number of failed transactions|latency average)(?:: | = )([0-9.]+)`)

// parsePgbench reads pgbench's summary.
func parsePgbench(out string) (pgbenchResult, error) {
	var res pgbenchResult
	for _, m := range pgbenchRe.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		switch m[1] {
		case "tps":
			res.TPS = v
		case "latency average":
			res.LatencyMs = v
		case "number of failed transactions":
			res.Failed = int64(v)
		default:
			res.Processed = int64(v)
		}
	}
	if res.TPS == 0 {
		return res, fmt.Errorf("no tps in pgbench output:\n%s", out)
	}
	return res, nil
}

// pgbench runs trips as a pgbench script (written to path) with args, as
// user uid, against url in prepared mode, as pgx sends statements, and
// returns its output. It runs pgbench from the cluster's server binaries
// when they have one, with env (PGOPTIONS, say) added to this process's.
func (c *capture) pgbench(ctx context.Context, cluster localpg.Cluster, url, path string, trips []trip, uid int64,
	env []string, args ...string) (string, error) {
	script, defs := c.script(trips)
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		return "", fmt.Errorf("write pgbench script: %w", err)
	}
	args = append(args, "-n", "-M", "prepared", "-f", path, "-D", fmt.Sprintf("uid=%d", uid), "-D", "n=0", url)
	for _, d := range defs {
		args = append(args, "-D", d)
	}
	bin := filepath.Join(cluster.BinDir, "pgbench")
	if _, err := os.Stat(bin); err != nil {
		bin = "pgbench"
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("pgbench %s: %w:\n%s", path, err, out)
	}
	return string(out), nil
}

// stepLimit measures the ceiling: pgbench running the captured ride on a
// freshly migrated database, as a user with the capture's API token.
func (r *run) stepLimit(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, r.cluster.DatabaseURL(limitDB))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	u, err := user.Upsert(ctx, conn, "pgbench@example.com", "cus_pgbench", captureToken)
	if err != nil {
		return err
	}
	for i, clients := range r.sz.pgbenchClients {
		d := map[bool]time.Duration{false: r.sz.short, true: r.sz.step}[clients == 32]
		before, err := readPosition(ctx, conn)
		if err != nil {
			return err
		}
		out, err := r.capture.pgbench(ctx, r.cluster, r.cluster.DatabaseURL(limitDB), filepath.Join(r.cfg.DataDir, "ride.sql"),
			r.capture.ride, u.ID, nil, "-D", fmt.Sprintf("run=%s%d", r.runID, i),
			"-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 2)), "-T", strconv.Itoa(int(d.Seconds())))
		if err != nil {
			return err
		}
		res, err := parsePgbench(out)
		if err != nil {
			return err
		}
		if err := r.perRide(ctx, conn, fmt.Sprintf("pgbench, %d clients", clients), before, res.Processed); err != nil {
			return err
		}
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

// position is where the database's counters stand: WAL bytes since the
// cluster began, and the next transaction id (pg_snapshot_xmax of a fresh
// snapshot, read without taking one). Both move in real time.
type position struct{ lsn, nextXID int64 }

func readPosition(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (p position, err error) {
	err = q.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).
		Scan(&p.lsn, &p.nextXID)
	return p, err
}

// perRide records the database's work per request since before: write
// transactions (one per transaction that wrote or locked a row) and WAL.
func (r *run) perRide(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, source string, before position, requests int64) error {
	after, err := readPosition(ctx, q)
	if err != nil || requests <= 0 {
		return err
	}
	r.finding("Database work per request:", []string{"source", "requests", "write xacts", "WAL bytes"},
		source, strconv.FormatInt(requests, 10),
		formatFloat(float64(after.nextXID-before.nextXID)/float64(requests)),
		formatFloat(float64(after.lsn-before.lsn)/float64(requests)))
	return nil
}

// measured runs l and records the database's work per request under
// source.
func (r *run) measured(ctx context.Context, source string, l Load) (LoadResult, error) {
	before, err := readPosition(ctx, r.db)
	if err != nil {
		return LoadResult{}, err
	}
	res, err := l.Run(ctx)
	if err != nil {
		return res, err
	}
	return res, r.perRide(ctx, r.db, source, before, int64(res.Total))
}
