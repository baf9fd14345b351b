package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
)

// What a ride costs Postgres, statement by statement. pg_stat_statements
// is loaded on the bench's cluster (statementStats), and the limit step
// runs each workload once more, a fixed number of rides at a few clients,
// between two reads of it: a new ride and a replay as the api sends them
// (the captured script), and the minimal design below. Each statement is
// reported per call (time, WAL, shared buffers) with its calls per ride,
// and each workload as a whole per ride (Postgres's CPU, WAL from the
// write-ahead log's position, statement time).

// minimalDB is the database of the minimal design's reference line.
const minimalDB = "bench_minimal"

// minimalSchema is the article's schema as the article gives it: the
// key's row, users, audit records, rides and staged jobs, with their
// constraints and the two indexes the article names. None of what the
// project adds (the identity, the steps, the lock token, the status, the
// tombstones, the completer's and reaper's indexes) is here.
const minimalSchema = `
CREATE TABLE users (
    id                 BIGSERIAL PRIMARY KEY,
    email              TEXT      NOT NULL UNIQUE CHECK (char_length(email) <= 255),
    stripe_customer_id TEXT      NOT NULL UNIQUE CHECK (char_length(stripe_customer_id) <= 50)
);
CREATE TABLE idempotency_keys (
    id              BIGSERIAL   PRIMARY KEY,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    idempotency_key TEXT        NOT NULL CHECK (char_length(idempotency_key) <= 100),
    last_run_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    locked_at       TIMESTAMPTZ DEFAULT now(),
    request_method  TEXT        NOT NULL CHECK (char_length(request_method) <= 10),
    request_params  JSONB       NOT NULL,
    request_path    TEXT        NOT NULL CHECK (char_length(request_path) <= 100),
    response_code   INT         NULL,
    response_body   JSONB       NULL,
    recovery_point  TEXT        NOT NULL CHECK (char_length(recovery_point) <= 50),
    user_id         BIGINT      NOT NULL REFERENCES users ON DELETE RESTRICT
);
CREATE UNIQUE INDEX idempotency_keys_user_id_idempotency_key ON idempotency_keys (user_id, idempotency_key);
CREATE TABLE audit_records (
    id            BIGSERIAL   PRIMARY KEY,
    action        TEXT        NOT NULL CHECK (char_length(action) <= 50),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    data          JSONB       NOT NULL,
    origin_ip     CIDR        NOT NULL,
    resource_id   BIGINT      NOT NULL,
    resource_type TEXT        NOT NULL CHECK (char_length(resource_type) <= 50),
    user_id       BIGINT      NOT NULL REFERENCES users ON DELETE RESTRICT
);
CREATE TABLE rides (
    id                 BIGSERIAL       PRIMARY KEY,
    created_at         TIMESTAMPTZ     NOT NULL DEFAULT now(),
    idempotency_key_id BIGINT          REFERENCES idempotency_keys ON DELETE SET NULL,
    origin_lat         NUMERIC(13, 10) NOT NULL,
    origin_lon         NUMERIC(13, 10) NOT NULL,
    target_lat         NUMERIC(13, 10) NOT NULL,
    target_lon         NUMERIC(13, 10) NOT NULL,
    stripe_charge_id   TEXT            UNIQUE CHECK (char_length(stripe_charge_id) <= 50),
    user_id            BIGINT          NOT NULL REFERENCES users ON DELETE RESTRICT
);
CREATE INDEX rides_idempotency_key_id ON rides (idempotency_key_id) WHERE idempotency_key_id IS NOT NULL;
CREATE TABLE staged_jobs (
    id       BIGSERIAL PRIMARY KEY,
    job_name TEXT      NOT NULL,
    job_args JSONB     NOT NULL
);
INSERT INTO users (email, stripe_customer_id) VALUES ('minimal@example.com', 'cus_minimal');`

// minimalScript is the article's four atomic phases for one ride, as
// plain statements: the key's insert (an implicit transaction), the ride
// and its audit record with the key's move to ride_created, then the
// charge's id and the finish, two transactions in one pipeline, as the
// api sends them. Each transaction that the api pipelines is pipelined
// here, so that the two differ in what Postgres does, not in round trips.
// It needs -D uid, -D run and -D n=0, as the captured script does.
const minimalScript = `-- The article's design, plain statements (internal/proof/bench/cost.go).
\set n :n + 1
INSERT INTO idempotency_keys (user_id, idempotency_key, request_method, request_path, request_params, recovery_point, locked_at)
VALUES (:uid, 'min-' || :run::text || '-' || :client_id::text || '-' || :n::text, 'POST', '/rides',
        '{"origin_lat": 37.7749, "origin_lon": -122.4194, "target_lat": 37.8044, "target_lon": -122.2712}', 'started', now());
\startpipeline
BEGIN;
INSERT INTO rides (idempotency_key_id, origin_lat, origin_lon, target_lat, target_lon, user_id)
VALUES (currval('idempotency_keys_id_seq'), 37.7749, -122.4194, 37.8044, -122.2712, :uid);
INSERT INTO audit_records (user_id, action, resource_type, resource_id, origin_ip, data)
VALUES (:uid, 'ride.created', 'ride', currval('rides_id_seq'), '127.0.0.1',
        '{"origin_lat": 37.7749, "origin_lon": -122.4194, "target_lat": 37.8044, "target_lon": -122.2712}');
UPDATE idempotency_keys SET locked_at = now(), recovery_point = 'ride_created'
WHERE id = (SELECT currval('idempotency_keys_id_seq')) AND recovery_point = 'started';
COMMIT;
\endpipeline
\startpipeline
BEGIN;
UPDATE rides SET stripe_charge_id = 'ch_' || :run::text || '_' || :client_id::text || '_' || :n::text
WHERE id = (SELECT currval('rides_id_seq'));
UPDATE idempotency_keys SET locked_at = now(), recovery_point = 'charge_created'
WHERE id = (SELECT currval('idempotency_keys_id_seq')) AND recovery_point = 'ride_created';
COMMIT;
BEGIN;
INSERT INTO staged_jobs (job_args, job_name) VALUES (jsonb_build_object('amount', 2000, 'currency', 'usd', 'user_id', :uid::bigint), 'send_ride_receipt');
UPDATE idempotency_keys SET locked_at = NULL, recovery_point = 'finished', response_code = 201,
       response_body = jsonb_build_object('id', currval('rides_id_seq'), 'amount', 2000, 'currency', 'usd')
WHERE id = (SELECT currval('idempotency_keys_id_seq')) AND recovery_point = 'charge_created';
COMMIT;
\endpipeline
`

// createMinimal creates a database of the minimal design's, name, afresh
// and returns its user's id. A customer other than "" becomes the user's
// Stripe customer, for a database whose rides are charged.
func (r *run) createMinimal(ctx context.Context, conn *pgx.Conn, name, customer string) (int64, error) {
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return 0, err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return 0, err
	}
	db, err := pgx.Connect(ctx, r.cluster.DatabaseURL(name))
	if err != nil {
		return 0, err
	}
	defer db.Close(context.WithoutCancel(ctx))
	if _, err := db.Exec(ctx, minimalSchema); err != nil {
		return 0, fmt.Errorf("create the minimal design's schema: %w", err)
	}
	if customer != "" {
		if _, err := db.Exec(ctx, `UPDATE users SET stripe_customer_id = $1`, customer); err != nil {
			return 0, err
		}
	}
	var uid int64
	return uid, db.QueryRow(ctx, `SELECT id FROM users`).Scan(&uid)
}

// runPgbench runs script (written to path) with its -D definitions defs
// and args, as user uid, against url in prepared mode, as pgx sends
// statements, and returns its output. It runs the cluster's pgbench with
// env (PGOPTIONS, say) added to this process's.
func runPgbench(ctx context.Context, cluster localpg.Cluster, url, path, script string, defs []string, uid int64,
	env []string, args ...string) (string, error) {
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		return "", fmt.Errorf("write pgbench script: %w", err)
	}
	args = append(args, "-n", "-M", "prepared", "-f", path, "-D", fmt.Sprintf("uid=%d", uid), "-D", "n=0", url)
	for _, d := range defs {
		args = append(args, "-D", d)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(cluster.BinDir, "pgbench"), args...)
	cmd.Env = append(os.Environ(), env...)
	// The command beside the script, to take a figure again by hand.
	line := strings.Join(env, " ")
	for _, a := range cmd.Args {
		line += " '" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	if err := os.WriteFile(path+".sh", []byte(strings.TrimSpace(line)+"\n"), 0o644); err != nil {
		return "", err
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("pgbench %s: %w:\n%s", path, err, out)
	}
	return string(out), nil
}

// statementStats loads pg_stat_statements on the cluster, restarting it
// if the library was not loaded yet (it is loaded at start only). The
// setting goes to postgresql.auto.conf, which localpg leaves alone.
func (r *run) statementStats(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, r.cluster.URL())
	if err != nil {
		return err
	}
	var loaded bool
	err = conn.QueryRow(ctx, `SELECT 'pg_stat_statements' = ANY (string_to_array(current_setting('shared_preload_libraries'), ', '))`).Scan(&loaded)
	if err == nil && !loaded {
		// Its default tracks statements, not the functions they call:
		// the fence's own SELECT is part of the fence's cost.
		_, err = conn.Exec(ctx, `ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'`)
	}
	conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return fmt.Errorf("load pg_stat_statements: %w", err)
	}
	if !loaded {
		r.logf("  restarting the cluster to load pg_stat_statements")
		if err := r.cluster.Restart(ctx); err != nil {
			return err
		}
	}
	return nil
}

// StatementCost is what one statement of a workload cost Postgres, per
// call, and how often a ride called it.
type StatementCost struct {
	Workload     string  `json:"workload"`
	Query        string  `json:"query"`
	CallsPerRide float64 `json:"calls_per_ride"`
	MeanMs       float64 `json:"mean_ms"`
	WALBytes     float64 `json:"wal_bytes_per_call"`
	Hit          float64 `json:"shared_hit_per_call"`
	Read         float64 `json:"shared_read_per_call"`
	Dirtied      float64 `json:"shared_dirtied_per_call"`
}

// accountClients and accountRides are each accounted workload's size: a
// few clients, so that the figures are not a queue's, and rides enough
// for a steady mean.
const accountClients = 4

func (r *run) accountRides() int {
	if r.cfg.Quick {
		return 250
	}
	return 1000
}

// workloadCost is what a whole workload cost Postgres per ride.
type workloadCost struct {
	cpu, statements time.Duration
	wal             float64
	rides           int64
}

// account runs one workload of rides rides per client (pgbench with
// script on database db) between two reads of pg_stat_statements and of
// Postgres's CPU and WAL position, and adds what each statement and the
// whole cost per ride.
func (r *run) account(ctx context.Context, workload, db, path, script string, defs []string, uid int64, run string) (workloadCost, error) {
	conn, err := pgx.Connect(ctx, r.cluster.DatabaseURL(db))
	if err != nil {
		return workloadCost{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return workloadCost{}, err
	}
	var lsn0, lsn1 string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text FROM pg_stat_statements_reset()`).Scan(&lsn0); err != nil {
		return workloadCost{}, err
	}
	cpu0 := r.postgresCPU()
	out, err := runPgbench(ctx, r.cluster, r.cluster.DatabaseURL(db), path, script, defs, uid, nil, "-D", "run="+run,
		"-c", strconv.Itoa(accountClients), "-j", "2", "-t", strconv.Itoa(r.accountRides()))
	if err != nil {
		return workloadCost{}, err
	}
	cpu := r.postgresCPU() - cpu0
	res, err := parsePgbench(out)
	if err != nil {
		return workloadCost{}, err
	}
	if res.Failed > 0 || res.Processed == 0 {
		return workloadCost{}, fmt.Errorf("%s: %d rides, %d failed", workload, res.Processed, res.Failed)
	}
	rides := float64(res.Processed)
	rows, err := conn.Query(ctx, `
		SELECT regexp_replace(query, '\s+', ' ', 'g'), calls::float8 / $2, mean_exec_time,
		       wal_bytes::float8 / calls, shared_blks_hit::float8 / calls, shared_blks_read::float8 / calls,
		       shared_blks_dirtied::float8 / calls, total_exec_time
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1) AND toplevel
		  AND query NOT LIKE '%pg_stat_statements%' AND calls >= $2 / 2
		ORDER BY total_exec_time DESC`, db, rides)
	if err != nil {
		return workloadCost{}, err
	}
	var total float64
	costs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (StatementCost, error) {
		c := StatementCost{Workload: workload}
		var t float64
		err := row.Scan(&c.Query, &c.CallsPerRide, &c.MeanMs, &c.WALBytes, &c.Hit, &c.Read, &c.Dirtied, &t)
		total += t
		c.Query = strings.TrimSpace(c.Query)
		return c, err
	})
	if err != nil {
		return workloadCost{}, err
	}
	if err := conn.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - $1::pg_lsn)::text`, lsn0).Scan(&lsn1); err != nil {
		return workloadCost{}, err
	}
	wal, _ := strconv.ParseFloat(lsn1, 64)
	r.report.Statements = append(r.report.Statements, costs...)
	w := workloadCost{cpu: cpu / time.Duration(res.Processed), wal: wal / rides, rides: res.Processed,
		statements: time.Duration(total / rides * float64(time.Millisecond))}
	r.add(Figure{Step: "1b cost per ride", Name: workload, Clients: accountClients, Value: ms(w.cpu), Unit: "ms Postgres CPU",
		Note: fmt.Sprintf("WAL %.0f B, statements %.3f ms, %d round trips, over %d rides", w.wal, ms(w.statements),
			strings.Count(script, "\\startpipeline")+countPlain(script), res.Processed)})
	return w, nil
}

// countPlain is the statements of a pgbench script sent outside any
// pipeline, each its own round trip.
func countPlain(script string) int {
	n, in := 0, false
	for _, line := range strings.Split(script, "\n") {
		switch t := strings.TrimSpace(line); {
		case t == `\startpipeline`:
			in = true
		case t == `\endpipeline`:
			in = false
		case !in && strings.HasSuffix(t, ";"):
			n++
		}
	}
	return n
}

// postgresCPU is the CPU the cluster's processes have used, the exited
// children's included (see cpuUseOf).
func (r *run) postgresCPU() time.Duration {
	procs, _ := r.cluster.Processes()
	var total time.Duration
	for i, pid := range procs {
		user, system, reaped := procCPU(pid)
		total += user + system
		if i == 0 {
			total += reaped
		}
	}
	return total
}

// StatementsTable lists what each statement cost, by workload.
func (r *Report) StatementsTable() Table {
	t := Table{Header: []string{"workload", "calls/ride", "mean ms", "WAL B", "hit", "read", "dirtied", "statement"}}
	for _, s := range r.Statements {
		q := s.Query
		if len(q) > 90 {
			q = q[:87] + "..."
		}
		t.Rows = append(t.Rows, []string{s.Workload, formatFloat(s.CallsPerRide), fmt.Sprintf("%.3f", s.MeanMs),
			formatFloat(s.WALBytes), formatFloat(s.Hit), formatFloat(s.Read), formatFloat(s.Dirtied), q})
	}
	return t
}
