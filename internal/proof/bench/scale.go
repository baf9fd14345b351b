package bench

import (
	"cmp"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// keyBatch is count generated finished keys, md5(prefix || g) as a UUID,
// created evenly between from and to, three in five the seeded user's.
// Key g's id is idBase + g, negative and lower for older batches, so that
// ids grow with created_at as when keys arrive over time (the reaper walks
// the primary key from the oldest).
type keyBatch struct {
	prefix   string
	count    int64
	from, to time.Time
	idBase   int64
}

// generatedKey is key g of a batch, as insertKeysSQL makes it.
func generatedKey(prefix string, g int64) string {
	return uuid.UUID(md5.Sum(fmt.Appendf(nil, "%s%d", prefix, g))).String()
}

// seededKey picks a random key of the batch that is the seeded user's.
func (b keyBatch) seededKey() string {
	for {
		if g := 1 + rand.Int64N(b.count); g%5 < 3 {
			return generatedKey(b.prefix, g)
		}
	}
}

// insertKeysSQL bulk-loads finished keys whose columns look like the
// api's: the ride's params, an origin address, a stored 201 whose body is
// the ride, the time of its charge attempt. It is data, not one of the
// api's statements, which the bench only ever captures.
const insertKeysSQL = `
INSERT INTO idempotency_keys (id, created_at, idempotency_key, last_run_at, locked_at,
	request_method, request_params, request_path, origin_ip,
	response_code, response_body, recovery_point, user_id, first_foreign_attempt_at)
SELECT $9::bigint + g, t, md5($1 || g)::uuid::text, t, NULL,
	'POST', $2::jsonb, '/rides', '10.0.0.1'::inet + (g % 65000),
	201, $2::jsonb || jsonb_build_object('id', g, 'created_at', t, 'amount', 2000, 'currency', 'usd',
		'stripe_charge_id', 'ch_' || substr(md5('ch' || $1 || g), 1, 24)),
	'finished', CASE WHEN g % 5 < 3 THEN $3::bigint ELSE $4::bigint END, t
FROM generate_series($5::bigint, $6::bigint) AS g,
	LATERAL (SELECT $7::timestamptz + (g - 1) * $8::interval AS t) AS ts`

// parallel runs fns at once, one per core here, and joins their errors.
func parallel(fns ...func() error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(fns))
	for i, fn := range fns {
		wg.Go(func() { errs[i] = fn() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// loadKeys loads batches, each in two halves at once, as figure name. It
// vacuums and checkpoints, so that the measurements that follow neither set
// hint bits nor share the disk with the checkpointer. Then it gives every
// expired key its ride, so that reaping a key also clears the ride's
// reference, as in production. Nothing else may use the tables meanwhile.
func (r *run) loadKeys(ctx context.Context, step, name string, batches ...keyBatch) error {
	begin, total := time.Now(), int64(0)
	index, err := r.withoutIndexes(ctx, "idempotency_keys", func() error {
		for _, b := range batches {
			total += b.count
			part := func(first, last int64) func() error {
				return func() error {
					_, err := r.db.Exec(ctx, insertKeysSQL, b.prefix, rideBody, r.userID, r.otherID, first, last, b.from, b.to.Sub(b.from)/time.Duration(b.count), b.idBase)
					return err
				}
			}
			if err := parallel(part(1, b.count/2), part(b.count/2+1, b.count)); err != nil {
				return fmt.Errorf("insert keys: %w", err)
			}
		}
		return nil
	})
	insert := time.Since(begin) - index
	if err != nil {
		return err
	}
	vacuum, err := r.vacuum(ctx, "idempotency_keys")
	took := time.Since(begin)
	r.add(Figure{Step: step, Name: name, Value: took.Seconds(), Unit: "s", Note: fmt.Sprintf(
		"insert %.0fs, rebuild indexes %.0fs, vacuum analyze and checkpoint %.0fs; %.0f keys/s",
		insert.Seconds(), index.Seconds(), vacuum.Seconds(), float64(total)/took.Seconds())})
	if err != nil {
		return err
	}
	begin = time.Now()
	if _, err = r.withoutIndexes(ctx, "rides", func() error {
		return insertRidesOfKeys(ctx, r.db, reaperMaxAge)
	}); err == nil {
		_, err = r.vacuum(ctx, "rides")
	}
	r.expiredDone = err == nil
	r.add(Figure{Step: step, Name: fmt.Sprintf("rides for the %s expired keys", count(r.sz.expiredKeys)),
		Value: time.Since(begin).Seconds(), Unit: "s", Note: "so that reaping a key clears its ride's reference, as in production"})
	return err
}

func (r *run) vacuum(ctx context.Context, table string) (time.Duration, error) {
	begin := time.Now()
	_, err := r.db.Exec(ctx, "VACUUM (ANALYZE) "+table)
	if err == nil {
		_, err = r.db.Exec(ctx, "CHECKPOINT")
	}
	return time.Since(begin), err
}

// withoutIndexes runs load with table's secondary indexes dropped, then
// builds them again, at once: one sort per index instead of millions of
// random B-tree insertions. Indexes that back a constraint stay. It
// returns how long the rebuild took.
func (r *run) withoutIndexes(ctx context.Context, table string, load func() error) (time.Duration, error) {
	rows, _ := r.db.Query(ctx, `
		SELECT pg_get_indexdef(indexrelid), format('DROP INDEX %s', indexrelid::regclass) FROM pg_index
		WHERE indrelid = $1::regclass AND NOT EXISTS (SELECT FROM pg_constraint WHERE conindid = indexrelid)`, table)
	indexes, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Create, Drop string }])
	var builds []func() error
	for _, i := range indexes {
		if err == nil {
			_, err = r.db.Exec(ctx, i.Drop)
		}
		builds = append(builds, func() error { _, err := r.db.Exec(ctx, i.Create); return err })
	}
	if err == nil {
		err = load()
	}
	begin := time.Now()
	if err == nil {
		err = parallel(builds...)
	}
	return time.Since(begin), err
}

// The generated keys: live ones from the last two days (younger than any
// reaper's horizon) and expired ones from three to four weeks ago.
func (r *run) liveBatch() keyBatch {
	return keyBatch{"live-" + r.runID + "-", r.sz.scaleKeys, time.Now().Add(-48 * time.Hour), time.Now().Add(-time.Minute), -10_000_000_000}
}

func (r *run) expiredBatch() keyBatch {
	return keyBatch{"old-" + r.runID + "-", r.sz.expiredKeys, time.Now().Add(-28 * 24 * time.Hour), time.Now().Add(-21 * 24 * time.Hour), -20_000_000_000}
}

// insertRidesOfKeys gives every key created more than olderThan ago the
// paid ride its request made, as the api would have left it.
func insertRidesOfKeys(ctx context.Context, db *pgxpool.Pool, olderThan time.Duration) error {
	_, err := db.Exec(ctx, `
		INSERT INTO rides (created_at, idempotency_key_id, origin_lat, origin_lon, target_lat, target_lon,
		                   amount, currency, stripe_charge_id, user_id, status)
		SELECT created_at, id, 37.7749, -122.4194, 37.8044, -122.2712, 2000, 'usd',
		       'ch_' || substr(md5('ch' || idempotency_key), 1, 24), user_id, 'succeeded'
		FROM idempotency_keys WHERE created_at < now() - $1::interval`, olderThan)
	if err != nil {
		return fmt.Errorf("insert the rides of keys older than %s: %w", olderThan, err)
	}
	return nil
}

// reaperMaxAge is the age past which the reaper removes keys in the bench.
const reaperMaxAge = 72 * time.Hour

const expiredSQL = `SELECT count(*) FROM idempotency_keys WHERE created_at < now() - $1::interval`

// stepScale loads the keys, then measures new rides and replays again
// and explains the ride's statements on the large table.
func (r *run) stepScale(ctx context.Context) error {
	live := r.liveBatch()
	total := live.count + r.sz.expiredKeys
	r.logf("  loading %d keys", total)
	if err := r.loadKeys(ctx, "5 scale", fmt.Sprintf("load %s finished keys + %s expired", count(live.count),
		count(r.sz.expiredKeys)), r.expiredBatch(), live); err != nil {
		return err
	}
	var size string
	if err := r.db.QueryRow(ctx, `SELECT pg_size_pretty(pg_total_relation_size('idempotency_keys'))`).Scan(&size); err != nil {
		return err
	}
	var err error
	if r.scaleNew, err = r.measure(ctx, r.rideLoad("scale32", 32, r.apis[:1]), Figure{Step: "5 scale",
		Name: fmt.Sprintf("new rides, %s keys in table", count(total)), Unit: "rides/s", RatioOf: "empty table"},
		r.newRides[32].Rate); err != nil {
		return err
	}
	if r.scaleReplay, err = r.measure(ctx, r.replaysOf(live.seededKey), Figure{Step: "5 scale", Unit: "responses/s",
		Name: fmt.Sprintf("replays, random of %s keys", count(live.count*3/5)), RatioOf: "empty table", Note: "table " + size},
		r.replays.Rate); err != nil {
		return err
	}
	// The captured ride and replay once more, as pgbench sends them, with
	// auto_explain sending each statement's plan back to pgbench.
	uid, err := r.capture.addUser(ctx, r.db)
	if err != nil {
		return err
	}
	out, err := r.capture.pgbench(ctx, r.cluster, r.cluster.DatabaseURL(apiDB), filepath.Join(r.cfg.DataDir, "explain.sql"),
		slices.Concat(r.capture.ride, r.capture.replay), uid, []string{"PGOPTIONS=-c session_preload_libraries=auto_explain " +
			"-c auto_explain.log_min_duration=0 -c auto_explain.log_analyze=on -c auto_explain.log_buffers=on -c client_min_messages=log"},
		"-D", "run=explain-"+r.runID, "-t", "1")
	r.report.Explain, _, _ = strings.Cut(out[strings.Index(out, "\n")+1:], "transaction type:")
	return err
}

// count renders a row count: 5M, 100k.
func count(n int64) string {
	switch {
	case n >= 1_000_000 && n%100_000 == 0:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/1e6), ".0") + "M"
	case n >= 1000 && n%100 == 0:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/1e3), ".0") + "k"
	}
	return fmt.Sprint(n)
}

// drain starts command (in its loop mode, as it runs in production) with
// env and polls the count query until it reaches zero or limit passes,
// then records the command's rate on the n rows it started with.
func (r *run) drain(ctx context.Context, command, name, unit string, n int64, limit time.Duration, query string, env ...string) (err error) {
	begin := time.Now()
	p, err := r.fleet.Start(ctx, command, env...)
	if err != nil {
		return err
	}
	// A command that does not stop cleanly is a finding too.
	defer func() { err = errors.Join(err, p.Stop(context.WithoutCancel(ctx))) }()
	var left int64
	for ; time.Since(begin) < limit; time.Sleep(200 * time.Millisecond) {
		if err := r.db.QueryRow(ctx, query).Scan(&left); err != nil {
			return fmt.Errorf("count what %s has left: %w", command, err)
		} else if left == 0 {
			break
		} else if !p.Running() {
			return fmt.Errorf("%s exited (%v); see %s", p.Name, p.ExitErr(), p.LogPath)
		}
	}
	elapsed := time.Since(begin)
	note := fmt.Sprintf("%.1fs; loop mode, %s; includes process start", elapsed.Seconds(), cmp.Or(strings.Join(env, " "), "default batch size"))
	if left > 0 {
		note += fmt.Sprintf("; stopped with %d left", left)
	}
	r.add(Figure{Step: "6 background", Name: name, Value: float64(n-left) / elapsed.Seconds(), Unit: unit, Note: note})
	return ctx.Err()
}

// stepEnqueuer measures how fast the enqueuer moves staged jobs into
// River: only generated ones, so that it drains exactly n.
func (r *run) stepEnqueuer(ctx context.Context) error {
	if _, err := r.db.Exec(ctx, `
		TRUNCATE staged_jobs;
		INSERT INTO staged_jobs (job_name, job_args)
		SELECT 'send_ride_receipt', jsonb_build_object('ride_id', 1000000000 + g, 'user_id', `+strconv.FormatInt(r.userID, 10)+`,
		       'amount', 2000, 'currency', 'usd', 'stripe_charge_id', 'ch_staged_' || g)
		FROM generate_series(1, `+strconv.FormatInt(r.sz.stagedJobs, 10)+`) AS g`); err != nil {
		return fmt.Errorf("stage jobs: %w", err)
	}
	if _, err := r.vacuum(ctx, "staged_jobs"); err != nil {
		return err
	}
	return r.drain(ctx, "enqueuer", fmt.Sprintf("enqueuer: drain %s staged jobs", count(r.sz.stagedJobs)), "jobs/s",
		r.sz.stagedJobs, r.sz.backgroundCap, `SELECT count(*) FROM staged_jobs`)
}

// stepCompleter measures how fast the completer finishes abandoned
// requests: keys left at started an hour ago, unlocked, as a crashed api
// leaves them.
func (r *run) stepCompleter(ctx context.Context) error {
	if _, err := r.db.Exec(ctx, `
		INSERT INTO idempotency_keys (created_at, idempotency_key, last_run_at, locked_at,
			request_method, request_params, request_path, origin_ip, recovery_point, user_id)
		SELECT now() - interval '1 hour', 'abandoned-' || $1 || g, now() - interval '1 hour', NULL,
		       'POST', $2::jsonb, '/rides', '127.0.0.1', 'started', $3
		FROM generate_series(1, $4::bigint) AS g`, r.runID, rideBody, r.userID, r.sz.completerKeys); err != nil {
		return fmt.Errorf("create abandoned keys: %w", err)
	}
	// Batches of a tenth of the keys; what follows may need two and a half
	// minutes: the reaper's baseline and a minute of reaping.
	return r.drain(ctx, "completer", fmt.Sprintf("completer: finish %s abandoned keys", count(r.sz.completerKeys)), "keys/s",
		r.sz.completerKeys, r.capFor(r.sz.backgroundCap, 150*time.Second),
		// Every unfinished key is abandoned here; the partial index on them
		// keeps the count from scanning millions of finished ones.
		`SELECT count(*) FROM idempotency_keys WHERE response_code IS NULL`,
		"COMPLETER_MIN_AGE=1m", "COMPLETER_RETRY_INTERVAL=1s", fmt.Sprintf("COMPLETER_BATCH_SIZE=%d", max(r.sz.completerKeys/10, 100)))
}

// stepReaper measures how long the reaper takes to remove the expired
// keys, and the api's latency at 32 clients while it does, against just
// before. A reaper still at work after reaperCap is stopped (SIGTERM: it
// finishes its batch) and its rate extrapolated.
func (r *run) stepReaper(ctx context.Context) error {
	if !r.expiredDone {
		if err := r.loadKeys(ctx, "6 background", fmt.Sprintf("load %s expired keys", count(r.sz.expiredKeys)), r.expiredBatch()); err != nil {
			return err
		}
	}
	var expired, left int64
	if err := r.db.QueryRow(ctx, expiredSQL, reaperMaxAge).Scan(&expired); err != nil {
		return err
	}
	// The api on its own, just before, for as long as the reaper will be
	// given: a p99 over a longer window catches more of the rare stalls
	// (a checkpoint, an autovacuum) that happen with or without a reaper,
	// so the two windows must be equally long to compare.
	limit := r.capFor(r.sz.reaperCap, 10*time.Second)
	l := r.rideLoad("reapbase", 32, r.apis[:1])
	l.Duration = limit
	var err error
	if r.reaperBase, err = r.measure(ctx, l, Figure{Step: "6 background", Name: "new rides before the reaper", Unit: "rides/s"}, 0); err != nil {
		return err
	}

	begin := time.Now()
	p, err := r.fleet.StartArgs(ctx, "reaper", []string{"-once"}, "REAPER_MAX_AGE="+reaperMaxAge.String())
	if err != nil {
		return err
	}
	l = r.rideLoad("reaping", 32, r.apis[:1])
	l.Warmup, l.Duration, l.Stop = 0, limit, p.Done()
	r.reaperLoad, err = l.Run(ctx)
	elapsed, stopped, exit := time.Since(begin), p.Running(), p.ExitErr()
	if stopped {
		exit = p.Stop(context.WithoutCancel(ctx))
	}
	if err := errors.Join(err, exit); err != nil {
		return fmt.Errorf("reaper -once: %w; see %s", err, p.LogPath)
	}
	if err := r.db.QueryRow(ctx, expiredSQL, reaperMaxAge).Scan(&left); err != nil {
		return err
	}
	removed, value := expired-left, elapsed.Seconds()
	note := fmt.Sprintf("%.0f keys/s; cmd/reaper -once (REAPER_MAX_AGE=%s, default batch size)", float64(removed)/value, reaperMaxAge)
	if stopped && removed > 0 && removed < expired {
		value *= float64(expired) / float64(removed)
		note = fmt.Sprintf("EXTRAPOLATED: stopped after %.0fs with %d of %d removed; ", elapsed.Seconds(), removed, expired) + note
	}
	r.add(Figure{Step: "6 background", Name: fmt.Sprintf("reaper: remove %s expired keys", count(expired)), Value: value, Unit: "s", Note: note})
	r.figure(Figure{Step: "6 background", Name: "new rides while the reaper runs", Unit: "rides/s", RatioOf: "before the reaper"},
		r.reaperLoad, r.reaperBase.Rate)
	return nil
}
