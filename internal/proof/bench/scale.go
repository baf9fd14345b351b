package bench

import (
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// keyBatch is a range of generated finished keys: md5(prefix || g) as a
// UUID for g in [1, count], created evenly between from and to, three in
// five the seeded user's and the rest the two others'. Key g's id is
// idBase + g: the bases are negative and the older batch's lower, so that
// ids grow with created_at across every key, the api's included, as when
// keys arrive over time (the reaper walks the primary key from the oldest).
type keyBatch struct {
	prefix   string
	count    int64
	from, to time.Time
	idBase   int64
}

// generatedKey is the Idempotency-Key of key g of a batch, as
// insertKeysSQL makes it.
func generatedKey(prefix string, g int64) string {
	return uuid.UUID(md5.Sum(fmt.Appendf(nil, "%s%d", prefix, g))).String()
}

// seededKey picks a random key of the batch that belongs to the seeded
// user.
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
SELECT $10::bigint + g, t, md5($1 || g)::uuid::text, t, NULL,
	'POST', $2::jsonb, '/rides', '10.0.0.1'::inet + (g % 65000),
	201, $2::jsonb || jsonb_build_object('id', g, 'created_at', t, 'amount', 2000, 'currency', 'usd',
		'stripe_charge_id', 'ch_' || substr(md5('ch' || $1 || g), 1, 24)),
	'finished', CASE WHEN g % 5 < 3 THEN $3::bigint WHEN g % 5 = 3 THEN $4::bigint ELSE $5::bigint END, t
FROM generate_series($6::bigint, $7::bigint) AS g,
	LATERAL (SELECT $8::timestamptz + (g - 1) * $9::interval AS t) AS ts`

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

// loadKeys loads batches one after the other, so that ids grow with
// created_at, each in two halves at once. It then vacuums, so that the
// measurements that follow do not pay for setting hint bits, and
// checkpoints, so that they do not share the disk with the checkpointer
// writing the loaded pages out. Nothing else may use the table meanwhile.
func (r *run) loadKeys(ctx context.Context, batches ...keyBatch) (string, time.Duration, error) {
	begin := time.Now()
	index, err := r.withoutIndexes(ctx, "idempotency_keys", func() error {
		for _, b := range batches {
			step, half := b.to.Sub(b.from)/time.Duration(b.count), b.count/2
			part := func(first, last int64) func() error {
				return func() error {
					_, err := r.db.Exec(ctx, insertKeysSQL, b.prefix, rideBody, r.userID, r.others[0], r.others[1],
						first, last, b.from, step, b.idBase)
					return err
				}
			}
			if err := parallel(part(1, half), part(half+1, b.count)); err != nil {
				return fmt.Errorf("insert keys: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return "", 0, err
	}
	insert := time.Since(begin) - index
	vacuum, err := r.vacuum(ctx, "idempotency_keys")
	return fmt.Sprintf("insert %.0fs, rebuild indexes %.0fs, vacuum analyze and checkpoint %.0fs",
		insert.Seconds(), index.Seconds(), vacuum.Seconds()), time.Since(begin), err
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
// builds them again two at a time: one sort per index instead of millions
// of random B-tree insertions. Indexes that back a constraint stay. It
// returns how long the rebuild took.
func (r *run) withoutIndexes(ctx context.Context, table string, load func() error) (time.Duration, error) {
	rows, _ := r.db.Query(ctx, `
		SELECT pg_get_indexdef(indexrelid), format('DROP INDEX %s', indexrelid::regclass) FROM pg_index
		WHERE indrelid = $1::regclass AND NOT EXISTS (SELECT FROM pg_constraint WHERE conindid = indexrelid)`, table)
	indexes, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Create, Drop string }])
	for _, i := range indexes {
		if err == nil {
			_, err = r.db.Exec(ctx, i.Drop)
		}
	}
	if err == nil {
		err = load()
	}
	if err != nil {
		return 0, err
	}
	begin := time.Now()
	build := func(indexes []struct{ Create, Drop string }) func() error {
		return func() error {
			return r.db.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
				_, err := c.Exec(ctx, "SET maintenance_work_mem = '1GB'")
				for _, i := range indexes {
					if err == nil {
						_, err = c.Exec(ctx, i.Create)
					}
				}
				return err
			})
		}
	}
	err = parallel(build(indexes[:len(indexes)/2]), build(indexes[len(indexes)/2:]))
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

// reaperMaxAge is the age past which the reaper removes keys in the bench.
const reaperMaxAge = 72 * time.Hour

// loadExpired loads the expired keys and gives each its ride, as finished
// keys have in life, so that removing a key also clears the ride's
// reference to it (ON DELETE SET NULL) as it would in production.
func (r *run) loadExpired(ctx context.Context, step string, batches ...keyBatch) error {
	times, took, err := r.loadKeys(ctx, batches...)
	if err != nil {
		return err
	}
	var total int64
	for _, b := range batches {
		total += b.count
	}
	name := fmt.Sprintf("load %s finished keys + %s expired", count(r.sz.scaleKeys), count(r.sz.expiredKeys))
	if len(batches) == 1 {
		name = fmt.Sprintf("load %s expired keys", count(r.sz.expiredKeys))
	}
	r.add(Figure{Step: step, Name: name, Value: took.Seconds(), Unit: "s",
		Note: fmt.Sprintf("%s; %.0f keys/s", times, float64(total)/took.Seconds())})
	begin := time.Now()
	if _, err = r.withoutIndexes(ctx, "rides", func() error {
		_, err := r.db.Exec(ctx, `
			INSERT INTO rides (created_at, idempotency_key_id, origin_lat, origin_lon, target_lat, target_lon,
			                   amount, currency, stripe_charge_id, user_id)
			SELECT created_at, id, 37.7749, -122.4194, 37.8044, -122.2712, 2000, 'usd',
			       'ch_' || substr(md5('ch' || idempotency_key), 1, 24), user_id
			FROM idempotency_keys WHERE created_at < now() - $1::interval`, reaperMaxAge)
		return err
	}); err == nil {
		_, err = r.vacuum(ctx, "rides")
	}
	r.expiredDone = err == nil
	r.add(Figure{Step: step, Name: fmt.Sprintf("rides for the %s expired keys", count(r.sz.expiredKeys)),
		Value: time.Since(begin).Seconds(), Unit: "s", Note: "so that reaping a key clears its ride's reference, as in production"})
	return err
}

// stepScale loads the keys (with the expired ones when the reaper step
// runs), then measures new rides and replays again and explains the
// ride's statements on the large table.
func (r *run) stepScale(ctx context.Context) error {
	live := r.liveBatch()
	total := live.count
	if r.selected("reaper") {
		total += r.sz.expiredKeys
		r.logf("  loading %d keys", total)
		if err := r.loadExpired(ctx, "5 scale", r.expiredBatch(), live); err != nil {
			return err
		}
	} else {
		times, took, err := r.loadKeys(ctx, live)
		if err != nil {
			return err
		}
		r.add(Figure{Step: "5 scale", Name: fmt.Sprintf("load %s finished keys", count(total)), Value: took.Seconds(), Unit: "s",
			Note: fmt.Sprintf("%s; %.0f keys/s", times, float64(total)/took.Seconds())})
	}
	var size string
	if err := r.db.QueryRow(ctx, `SELECT pg_size_pretty(pg_total_relation_size('idempotency_keys'))`).Scan(&size); err != nil {
		return err
	}
	var err error
	if r.scaleNew, err = r.measured(ctx, fmt.Sprintf("api new rides, 32 clients, %s keys", count(total)),
		r.rideLoad("scale32", 32, r.apis[:1], false)); err != nil {
		return err
	}
	fig := loadFigure("5 scale", fmt.Sprintf("new rides, %s keys in table", count(total)), r.scaleNew, "rides/s")
	fig.ratio(r.newRides[32].Rate, "empty table")
	r.add(fig)
	if r.scaleReplay, err = r.measured(ctx, fmt.Sprintf("api replays, 32 clients, %s keys", count(total)),
		r.replaysOf(live.seededKey)); err != nil {
		return err
	}
	fig = loadFigure("5 scale", fmt.Sprintf("replays, random of %s keys", count(live.count*3/5)), r.scaleReplay, "responses/s")
	fig.ratio(r.replays.Rate, "empty table")
	fig.note("table " + size)
	r.add(fig)
	// The captured ride and replay once more, as pgbench sends them, with
	// auto_explain sending each statement's plan back to pgbench.
	out, err := r.capture.pgbench(ctx, r.cluster, r.cluster.DatabaseURL(apiDB), filepath.Join(r.cfg.DataDir, "explain.sql"),
		slices.Concat(r.capture.ride, r.capture.replay), r.userID, []string{"PGOPTIONS=-c session_preload_libraries=auto_explain " +
			"-c auto_explain.log_min_duration=0 -c auto_explain.log_analyze=on -c auto_explain.log_buffers=on -c client_min_messages=log"},
		"-D", "run=explain-"+r.runID, "-t", "1")
	out, _, _ = strings.Cut(out[strings.Index(out, "\n")+1:], "transaction type:")
	r.report.Findings = append(r.report.Findings, Section{Title: fmt.Sprintf("EXPLAIN ANALYZE of a captured ride and replay, %s keys:", count(total)), Text: out})
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
