package bench

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// stepEnqueuer measures how fast the enqueuer (in its loop mode, as it
// runs in production) moves staged jobs into River.
func (r *run) stepEnqueuer(ctx context.Context) error {
	n := r.sz.stagedJobs
	// Only the generated jobs: the api's are gone, so the count below is
	// the enqueuer's progress on exactly n.
	if _, err := r.db.Exec(ctx, `TRUNCATE staged_jobs`); err != nil {
		return fmt.Errorf("empty staged_jobs: %w", err)
	}
	if _, err := r.db.Exec(ctx, `
		INSERT INTO staged_jobs (job_name, job_args)
		SELECT 'send_ride_receipt',
		       jsonb_build_object('ride_id', 1000000000 + g, 'user_id', $2::bigint, 'amount', 2000,
		                          'currency', 'usd', 'stripe_charge_id', 'ch_staged_' || g)
		FROM generate_series(1, $1::bigint) AS g`, n, r.userID); err != nil {
		return fmt.Errorf("stage jobs: %w", err)
	}
	if _, err := r.db.Exec(ctx, `VACUUM (ANALYZE) staged_jobs`); err != nil {
		return err
	}
	begin := time.Now()
	p, err := startProc(r.logDir, "enqueuer", r.bin("enqueuer"), []string{"DATABASE_URL=" + r.cluster.DatabaseURL(apiDB)})
	if err != nil {
		return err
	}
	defer p.stop()
	left, err := r.waitFor(ctx, p, `SELECT count(*) FROM staged_jobs`, r.sz.backgroundCap)
	if err != nil {
		return err
	}
	elapsed := time.Since(begin)
	moved := n - left
	note := "loop mode, default batch size; includes process start"
	if left > 0 {
		note = fmt.Sprintf("stopped after %.0fs with %d left; ", elapsed.Seconds(), left) + note
	}
	r.add(Figure{Step: "6 background", Name: fmt.Sprintf("enqueuer: drain %s staged jobs", count(n)),
		Value: float64(moved) / elapsed.Seconds(), Unit: "jobs/s", Note: fmt.Sprintf("%.1fs; %s", elapsed.Seconds(), note)})
	return nil
}

// waitFor polls query (a count) until it is zero, p exits or limit
// passes, and returns the last count.
func (r *run) waitFor(ctx context.Context, p *proc, query string, limit time.Duration, args ...any) (int64, error) {
	deadline := time.Now().Add(limit)
	for {
		var left int64
		if err := r.db.QueryRow(ctx, query, args...).Scan(&left); err != nil {
			return 0, fmt.Errorf("poll progress: %w", err)
		}
		if left == 0 || time.Now().After(deadline) {
			return left, nil
		}
		if p != nil && p.exited() {
			return left, fmt.Errorf("%s exited (%v); see %s", p.name, p.err, p.log.Name())
		}
		select {
		case <-ctx.Done():
			return left, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

var completerRe = regexp.MustCompile(`succeeded=(\d+) failed=(\d+)`)

// stepCompleter measures how fast the completer finishes abandoned
// requests: keys left at started an hour ago, unlocked, as a crashed api
// leaves them.
func (r *run) stepCompleter(ctx context.Context) error {
	name := fmt.Sprintf("completer: finish %s abandoned keys", count(r.sz.completerKeys))
	if !r.built["completer"] {
		r.add(Figure{Step: "6 background", Name: name, Unit: "keys/s", Note: "not measured: no cmd/completer in this tree"})
		return nil
	}
	prefix := "abandoned-" + r.runID + "-"
	if _, err := r.db.Exec(ctx, `
		INSERT INTO idempotency_keys (created_at, idempotency_key, last_run_at, locked_at, lock_token,
			request_method, request_params, request_path, origin_ip, recovery_point, user_id)
		SELECT now() - interval '1 hour', $1 || g, now() - interval '1 hour', NULL, NULL,
		       'POST', $2::jsonb, '/rides', '127.0.0.1', 'started', $3
		FROM generate_series(1, $4::bigint) AS g`,
		prefix, rideParams.Canonical(), r.userID, r.sz.completerKeys); err != nil {
		return fmt.Errorf("create abandoned keys: %w", err)
	}
	left := func() (int64, error) {
		var n int64
		err := r.db.QueryRow(ctx, `
			SELECT count(*) FROM idempotency_keys
			WHERE user_id = $1 AND idempotency_key LIKE $2 AND recovery_point <> 'finished'`,
			r.userID, prefix+"%").Scan(&n)
		return n, err
	}
	// -once works its whole batch before it returns; batches of a tenth
	// of the keys keep the step within its time cap.
	batch := max(r.sz.completerKeys/10, 100)
	env := append(r.stripeEnv(apiDB),
		"COMPLETER_MIN_AGE=1m", "COMPLETER_RETRY_INTERVAL=1s",
		"COMPLETER_BATCH_SIZE="+strconv.FormatInt(batch, 10))
	// What follows may need two and a half minutes: the partition step,
	// the reaper's baseline and a minute of reaping.
	limit := r.capFor(r.sz.backgroundCap, 150*time.Second)
	begin := time.Now()
	runs, failed := 0, int64(0)
	remaining := r.sz.completerKeys
	for time.Since(begin) < limit {
		out, err := runTool(ctx, r.bin("completer"), env, "-once")
		if err != nil {
			return err
		}
		runs++
		m := completerRe.FindStringSubmatch(out)
		if m == nil {
			return fmt.Errorf("completer -once printed %q, not succeeded=N failed=M", out)
		}
		succeeded, _ := strconv.ParseInt(m[1], 10, 64)
		f, _ := strconv.ParseInt(m[2], 10, 64)
		failed += f
		if remaining, err = left(); err != nil {
			return err
		}
		if remaining == 0 || succeeded+f == 0 {
			break
		}
	}
	elapsed := time.Since(begin)
	done := r.sz.completerKeys - remaining
	note := fmt.Sprintf("%.1fs, %d runs of -once with COMPLETER_BATCH_SIZE=%d, %d failed", elapsed.Seconds(), runs, batch, failed)
	if remaining > 0 {
		note += fmt.Sprintf(", %d left unfinished", remaining)
	}
	r.add(Figure{Step: "6 background", Name: name, Value: float64(done) / elapsed.Seconds(), Unit: "keys/s",
		Errors: int(failed), Note: note})
	return nil
}

// loadExpired puts the expired keys and their rides in place when the
// scale step did not.
func (r *run) loadExpired(ctx context.Context) error {
	if r.expiredDone {
		return nil
	}
	r.logf("  loading %d expired keys", r.sz.expiredKeys)
	times, err := r.bulkLoadKeys(ctx, r.expiredBatch())
	if err != nil {
		return err
	}
	d, err := r.addExpiredRides(ctx)
	if err != nil {
		return err
	}
	r.expiredDone = true
	r.add(Figure{Step: "6 background", Name: fmt.Sprintf("load %s expired keys and their rides", count(r.sz.expiredKeys)),
		Value: (times.total() + d).Seconds(), Unit: "s", Note: times.String()})
	return nil
}

// stepReaper measures how long the reaper takes to remove the expired
// keys, and the api's latency at 32 clients while it does, against just
// before. A reaper still at work after reaperCap is stopped (SIGTERM: it
// finishes its batch) and its rate extrapolated.
func (r *run) stepReaper(ctx context.Context) error {
	if err := r.loadExpired(ctx); err != nil {
		return err
	}
	expired, err := r.countExpired(ctx)
	if err != nil {
		return err
	}

	// The api on its own, just before, for as long as the reaper will be
	// given: a p99 over a longer window catches more of the rare stalls
	// (a checkpoint, an autovacuum) that happen with or without a reaper,
	// so the two windows must be equally long to compare.
	limit := r.capFor(r.sz.reaperCap, 10*time.Second)
	baseLoad := r.rideLoad("reapbase", 32, r.apiURLs[:1], false)
	baseLoad.Duration = limit
	base, err := baseLoad.Run(ctx)
	if err != nil {
		return err
	}
	r.reaperBase = &base
	r.add(loadFigure("6 background", "new rides before the reaper", base, "rides/s"))

	done := make(chan struct{})
	type outcome struct {
		elapsed time.Duration
		stopped bool
		how     string
		err     error
	}
	result := make(chan outcome, 1)
	go func() {
		o := outcome{}
		begin := time.Now()
		defer func() {
			o.elapsed = time.Since(begin)
			close(done)
			result <- o
		}()
		if !r.built["reaper"] {
			o.how = "no cmd/reaper in this tree: the bench's own DELETE of 1000 keys at a time"
			for time.Since(begin) < limit {
				n, err := r.deleteExpiredBatch(ctx)
				if err != nil || n == 0 {
					o.err = err
					return
				}
			}
			o.stopped = true
			return
		}
		o.how = "cmd/reaper -once (REAPER_MAX_AGE=" + reaperMaxAge.String() + ", default batch size)"
		env := append(r.stripeEnv(apiDB), "REAPER_MAX_AGE="+reaperMaxAge.String())
		p, err := startProc(r.logDir, "reaper", r.bin("reaper"), env, "-once")
		if err != nil {
			o.err = err
			return
		}
		select {
		case <-p.done:
			if p.err != nil {
				o.err = fmt.Errorf("reaper -once: %w; see %s", p.err, p.log.Name())
			}
			p.stop()
		case <-time.After(limit):
			o.stopped = true
			p.stop()
		case <-ctx.Done():
			p.stop()
		}
	}()
	during := r.rideLoad("reaping", 32, r.apiURLs[:1], false)
	during.Warmup, during.Duration, during.Stop = 0, limit+time.Minute, done
	res, err := during.Run(ctx)
	o := <-result
	if err != nil {
		return err
	}
	if o.err != nil {
		return o.err
	}
	left, err := r.countExpired(ctx)
	if err != nil {
		return err
	}
	removed := expired - left
	r.reaperLoad = &res
	name := fmt.Sprintf("reaper: remove %s expired keys", count(expired))
	note := fmt.Sprintf("%.0f keys/s; %s", float64(removed)/o.elapsed.Seconds(), o.how)
	value := o.elapsed.Seconds()
	if o.stopped && removed > 0 && removed < expired {
		value = o.elapsed.Seconds() * float64(expired) / float64(removed)
		note = fmt.Sprintf("EXTRAPOLATED: stopped after %.0fs with %d of %d removed; ", o.elapsed.Seconds(), removed, expired) + note
	}
	r.add(Figure{Step: "6 background", Name: name, Value: value, Unit: "s", Note: note})
	fig := loadFigure("6 background", "new rides while the reaper runs", res, "rides/s")
	if base.Rate > 0 {
		fig.Ratio, fig.RatioOf = res.Rate/base.Rate, "before the reaper"
	}
	r.add(fig)
	return nil
}

func (r *run) countExpired(ctx context.Context) (int64, error) {
	var n int64
	err := r.db.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE created_at < now() - $1::interval`,
		reaperMaxAge).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count expired keys: %w", err)
	}
	return n, nil
}

// deleteExpiredBatch removes one batch of expired keys the way a reaper
// would, for trees without cmd/reaper.
func (r *run) deleteExpiredBatch(ctx context.Context) (int64, error) {
	tag, err := r.db.Exec(ctx, `
		DELETE FROM idempotency_keys
		WHERE id IN (SELECT id FROM idempotency_keys
		             WHERE created_at < now() - $1::interval AND recovery_point = 'finished'
		             ORDER BY id LIMIT 1000
		             FOR UPDATE SKIP LOCKED)`, reaperMaxAge)
	if err != nil {
		return 0, fmt.Errorf("delete expired keys: %w", err)
	}
	return tag.RowsAffected(), nil
}

// stepPartition compares the two ways to remove expired keys: DELETE in
// batches from a plain table (what a reaper does today) and DROP of the
// daily partitions of a table partitioned by created_at. Both tables are
// scratch copies of idempotency_keys' shape holding the expired keys,
// without foreign keys (rides do not point at them).
func (r *run) stepPartition(ctx context.Context) error {
	if err := r.loadExpired(ctx); err != nil {
		return err
	}
	var (
		from, to time.Time
		n        int64
	)
	if err := r.db.QueryRow(ctx, `
		SELECT min(created_at), max(created_at), count(*) FROM idempotency_keys
		WHERE created_at < now() - $1::interval`, reaperMaxAge).Scan(&from, &to, &n); err != nil {
		return fmt.Errorf("find expired keys: %w", err)
	}
	from = from.UTC().Truncate(24 * time.Hour)
	ddl := []string{
		`DROP TABLE IF EXISTS bench_keys_plain, bench_keys_part`,
		`CREATE TABLE bench_keys_plain (LIKE idempotency_keys INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`,
		// A partitioned table's unique indexes must contain the partition
		// key, so (user_id, idempotency_key) alone cannot be unique here.
		`CREATE TABLE bench_keys_part (LIKE idempotency_keys INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
		 PARTITION BY RANGE (created_at)`,
	}
	days := 0
	for day := from; !day.After(to); day = day.Add(24 * time.Hour) {
		ddl = append(ddl, fmt.Sprintf(`CREATE TABLE bench_keys_part_%d PARTITION OF bench_keys_part
			FOR VALUES FROM ('%s') TO ('%s')`, days, day.Format(time.RFC3339), day.Add(24*time.Hour).Format(time.RFC3339)))
		days++
	}
	for _, q := range ddl {
		if _, err := r.db.Exec(ctx, q); err != nil {
			return fmt.Errorf("create scratch tables: %w", err)
		}
	}
	var g group
	for _, table := range []string{"bench_keys_plain", "bench_keys_part"} {
		g.Go(func() error {
			_, err := r.db.Exec(ctx, `INSERT INTO `+table+` SELECT * FROM idempotency_keys WHERE created_at < now() - $1::interval`,
				reaperMaxAge)
			if err != nil {
				return fmt.Errorf("copy expired keys into %s: %w", table, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, q := range []string{
		`ALTER TABLE bench_keys_plain ADD PRIMARY KEY (id)`,
		`CREATE UNIQUE INDEX ON bench_keys_plain (user_id, idempotency_key)`,
		`CREATE INDEX ON bench_keys_plain (created_at)`,
		`CREATE INDEX ON bench_keys_plain (last_run_at) WHERE response_code IS NULL`,
		`ALTER TABLE bench_keys_part ADD PRIMARY KEY (id, created_at)`,
		`CREATE UNIQUE INDEX ON bench_keys_part (user_id, idempotency_key, created_at)`,
		`CREATE INDEX ON bench_keys_part (last_run_at) WHERE response_code IS NULL`,
		`VACUUM (ANALYZE) bench_keys_plain`,
		`VACUUM (ANALYZE) bench_keys_part`,
	} {
		if _, err := r.db.Exec(ctx, q); err != nil {
			return fmt.Errorf("index scratch tables: %w", err)
		}
	}

	// DELETE in batches, every key being past the horizon.
	before, err := readPosition(ctx, r.db)
	if err != nil {
		return err
	}
	begin := time.Now()
	var deleted int64
	for {
		tag, err := r.db.Exec(ctx, `
			DELETE FROM bench_keys_plain
			WHERE id IN (SELECT id FROM bench_keys_plain WHERE created_at < now() - $1::interval
			             ORDER BY id LIMIT 1000)`, reaperMaxAge)
		if err != nil {
			return fmt.Errorf("delete scratch keys: %w", err)
		}
		deleted += tag.RowsAffected()
		if tag.RowsAffected() == 0 {
			break
		}
	}
	deleteTime := time.Since(begin)
	mid, err := readPosition(ctx, r.db)
	if err != nil {
		return err
	}

	// DROP every partition past the horizon.
	rows, err := r.db.Query(ctx, `
		SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'bench_keys_part'::regclass ORDER BY c.relname`)
	if err != nil {
		return err
	}
	parts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	begin = time.Now()
	for _, p := range parts {
		if _, err := r.db.Exec(ctx, "DROP TABLE "+pgx.Identifier{p}.Sanitize()); err != nil {
			return fmt.Errorf("drop partition %s: %w", p, err)
		}
	}
	dropTime := time.Since(begin)
	after, err := readPosition(ctx, r.db)
	if err != nil {
		return err
	}
	if _, err := r.db.Exec(ctx, `DROP TABLE bench_keys_plain, bench_keys_part`); err != nil {
		return err
	}

	r.add(Figure{Step: "8 partitioning", Name: fmt.Sprintf("DELETE %s keys, 1000 per batch", count(deleted)),
		Value: deleteTime.Seconds(), Unit: "s",
		Note: fmt.Sprintf("%.0f keys/s; %.0f MB of WAL; no foreign keys; the table keeps its size until vacuumed",
			float64(deleted)/deleteTime.Seconds(), float64(mid.lsn-before.lsn)/1e6)})
	fig := Figure{Step: "8 partitioning", Name: fmt.Sprintf("DROP %d daily partitions, same keys", len(parts)),
		Value: dropTime.Seconds(), Unit: "s",
		Note: fmt.Sprintf("%.2f MB of WAL; files unlinked at commit", float64(after.lsn-mid.lsn)/1e6)}
	if dropTime > 0 {
		fig.Ratio, fig.RatioOf = deleteTime.Seconds()/dropTime.Seconds(), "DELETE time / DROP time"
	}
	r.add(fig)
	return nil
}
