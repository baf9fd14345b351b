package bench

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// keyBatch is a range of generated finished keys: md5(prefix || g) as a
// UUID for g in [first, first+count), created evenly between from and to.
// Three in five belong to the seeded user, the rest to the two others.
type keyBatch struct {
	prefix   string
	first    int64
	count    int64
	from, to time.Time
	// idBase + g is key g's id. The bases are negative and the older
	// batch's lower, so that ids grow with created_at across every key,
	// the api's included, as they do when keys arrive over time: the
	// reaper walks the primary key from the oldest.
	idBase int64
}

// generatedKey is the Idempotency-Key of key g of a batch, as the SQL
// below makes it.
func generatedKey(prefix string, g int64) string {
	sum := md5.Sum([]byte(fmt.Sprintf("%s%d", prefix, g)))
	h := hex.EncodeToString(sum[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// seededKey picks a random key of the batch that belongs to the seeded
// user.
func (b keyBatch) seededKey() string {
	for {
		g := b.first + rand.Int64N(b.count)
		if g%5 < 3 {
			return generatedKey(b.prefix, g)
		}
	}
}

// insertKeysSQL fills table with finished keys whose columns look like the
// api's: the canonical params, an origin address, a stored 201 whose body
// is the ride, the time of its charge attempt. Ids are given, not drawn from the
// sequence: see keyBatch.idBase.
const insertKeysSQL = `
INSERT INTO %s (id, created_at, idempotency_key, last_run_at, locked_at, lock_token,
	request_method, request_params, request_path, origin_ip,
	response_code, response_body, recovery_point, user_id,
	unknown_outcomes, first_foreign_attempt_at)
SELECT $10::bigint + g, t, md5($1 || g)::uuid::text, t, NULL, NULL,
	'POST', $2::jsonb, '/rides', '10.0.0.1'::inet + (g %% 65000),
	201,
	$11::jsonb || jsonb_build_object('id', g, 'created_at', t,
		'stripe_charge_id', 'ch_' || substr(md5('ch' || $1 || g), 1, 24)),
	'finished',
	CASE WHEN g %% 5 < 3 THEN $3::bigint WHEN g %% 5 = 3 THEN $4::bigint ELSE $5::bigint END,
	0, t
FROM generate_series($6::bigint, $7::bigint) AS g,
	LATERAL (SELECT $8::timestamptz + (g - $6) * $9::interval AS t) AS ts`

// rideBodyConstant is the part of a stored ride that every ride shares.
const rideBodyConstant = `{"amount": 2000, "currency": "usd", "origin_lat": 37.7749, "origin_lon": -122.4194, ` +
	`"target_lat": 37.8044, "target_lon": -122.2712}`

// insertKeys loads batches into table one after the other, so that ids
// grow with created_at across batches as they do when keys arrive over
// time (the reaper's batches walk the primary key). Each batch is split
// across two connections, one per core here.
func (r *run) insertKeys(ctx context.Context, table string, batches ...keyBatch) error {
	const parts = 2
	for _, b := range batches {
		var g group
		step := b.to.Sub(b.from) / time.Duration(max(b.count, 1))
		per := (b.count + parts - 1) / parts
		for p := range int64(parts) {
			first := b.first + p*per
			last := min(first+per, b.first+b.count) - 1
			if last < first {
				continue
			}
			g.Go(func() error {
				_, err := r.db.Exec(ctx, fmt.Sprintf(insertKeysSQL, table),
					b.prefix, rideParams.Canonical(), r.userID, r.others[0], r.others[1],
					first, last, b.from.Add(time.Duration(first-b.first)*step), step, b.idBase, rideBodyConstant)
				if err != nil {
					return fmt.Errorf("insert keys %d..%d into %s: %w", first, last, table, err)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
	}
	return nil
}

// loadTimes is how long a bulk load took, phase by phase.
type loadTimes struct {
	insert, index, vacuum time.Duration
}

func (t loadTimes) total() time.Duration { return t.insert + t.index + t.vacuum }

func (t loadTimes) String() string {
	return fmt.Sprintf("insert %.0fs, rebuild indexes %.0fs, vacuum analyze and checkpoint %.0fs",
		t.insert.Seconds(), t.index.Seconds(), t.vacuum.Seconds())
}

// bulkLoadKeys loads batches into idempotency_keys the fast way (see
// withoutIndexes), then vacuums the table so that the measurements that
// follow do not pay for setting hint bits, and checkpoints so that they do
// not share the disk with the checkpointer writing gigabytes of loaded
// pages out. Nothing else may use the table meanwhile.
func (r *run) bulkLoadKeys(ctx context.Context, batches ...keyBatch) (loadTimes, error) {
	var t loadTimes
	var err error
	t.insert, t.index, err = r.withoutIndexes(ctx, "idempotency_keys", func() error {
		return r.insertKeys(ctx, "idempotency_keys", batches...)
	})
	if err != nil {
		return t, err
	}
	begin := time.Now()
	if _, err := r.db.Exec(ctx, "VACUUM (ANALYZE) idempotency_keys"); err != nil {
		return t, fmt.Errorf("vacuum idempotency_keys: %w", err)
	}
	if _, err := r.db.Exec(ctx, "CHECKPOINT"); err != nil {
		return t, fmt.Errorf("checkpoint after loading idempotency_keys: %w", err)
	}
	t.vacuum = time.Since(begin)
	return t, nil
}

// withoutIndexes runs load with table's secondary indexes dropped and
// builds them again afterwards: one sort per index instead of millions of
// random B-tree insertions. Indexes that back a constraint stay. It
// returns how long the load and the rebuild took.
func (r *run) withoutIndexes(ctx context.Context, table string, load func() error) (loadTime, indexTime time.Duration, err error) {
	rows, err := r.db.Query(ctx, `
		SELECT c.relname, pg_get_indexdef(c.oid)
		FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
		WHERE x.indrelid = $1::regclass
		  AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = x.indexrelid)`, table)
	if err != nil {
		return 0, 0, fmt.Errorf("list indexes of %s: %w", table, err)
	}
	type index struct{ name, def string }
	indexes, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (index, error) {
		var i index
		return i, row.Scan(&i.name, &i.def)
	})
	if err != nil {
		return 0, 0, fmt.Errorf("list indexes of %s: %w", table, err)
	}
	for _, i := range indexes {
		if _, err := r.db.Exec(ctx, "DROP INDEX "+pgx.Identifier{i.name}.Sanitize()); err != nil {
			return 0, 0, fmt.Errorf("drop index %s: %w", i.name, err)
		}
	}
	begin := time.Now()
	if err := load(); err != nil {
		return 0, 0, err
	}
	loadTime = time.Since(begin)

	begin = time.Now()
	var g group
	queue := make(chan index, len(indexes))
	for _, i := range indexes {
		queue <- i
	}
	close(queue)
	// Two builds at a time: one per core.
	for range 2 {
		g.Go(func() error {
			conn, err := r.db.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, "SET maintenance_work_mem = '1GB'"); err != nil {
				return err
			}
			for i := range queue {
				if _, err := conn.Exec(ctx, i.def); err != nil {
					return fmt.Errorf("rebuild index %s: %w", i.name, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, 0, err
	}
	return loadTime, time.Since(begin), nil
}

// The generated keys: live ones from the last two days (younger than any
// reaper's horizon) and expired ones from three to four weeks ago.
func (r *run) liveBatch() keyBatch {
	now := time.Now()
	return keyBatch{prefix: "live-" + r.runID + "-", first: 1, count: r.sz.scaleKeys,
		from: now.Add(-48 * time.Hour), to: now.Add(-time.Minute), idBase: -10_000_000_000}
}

func (r *run) expiredBatch() keyBatch {
	now := time.Now()
	return keyBatch{prefix: "old-" + r.runID + "-", first: 1, count: r.sz.expiredKeys,
		from: now.Add(-28 * 24 * time.Hour), to: now.Add(-21 * 24 * time.Hour), idBase: -20_000_000_000}
}

// reaperMaxAge is the age past which the reaper removes keys in the bench.
const reaperMaxAge = 72 * time.Hour

// addExpiredRides gives every expired key its ride, as finished keys have
// in life, so that removing a key also clears the ride's reference to it
// (rides.idempotency_key_id ON DELETE SET NULL) as it would in production.
func (r *run) addExpiredRides(ctx context.Context) (time.Duration, error) {
	begin := time.Now()
	_, _, err := r.withoutIndexes(ctx, "rides", func() error {
		_, err := r.db.Exec(ctx, `
			INSERT INTO rides (created_at, idempotency_key_id, origin_lat, origin_lon, target_lat, target_lon,
			                   amount, currency, stripe_charge_id, status, user_id)
			SELECT created_at, id, 37.7749, -122.4194, 37.8044, -122.2712, 2000, 'usd',
			       'ch_' || substr(md5('ch' || idempotency_key), 1, 24), 'succeeded', user_id
			FROM idempotency_keys
			WHERE created_at < now() - $1::interval`, reaperMaxAge)
		if err != nil {
			return fmt.Errorf("insert rides of expired keys: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if _, err := r.db.Exec(ctx, "VACUUM (ANALYZE) rides"); err != nil {
		return 0, fmt.Errorf("vacuum rides: %w", err)
	}
	if _, err := r.db.Exec(ctx, "CHECKPOINT"); err != nil {
		return 0, fmt.Errorf("checkpoint after loading rides: %w", err)
	}
	return time.Since(begin), nil
}

// stepScale loads the keys (and, when the reaper step runs, the expired
// keys with their rides in the same pass), then measures new rides and
// replays again and explains the hot statements.
func (r *run) stepScale(ctx context.Context) error {
	batches := []keyBatch{r.liveBatch()}
	withExpired := r.selected("reaper") || r.selected("partition")
	if withExpired {
		batches = []keyBatch{r.expiredBatch(), r.liveBatch()}
	}
	var total int64
	for _, b := range batches {
		total += b.count
	}
	r.logf("  loading %d keys into idempotency_keys", total)
	times, err := r.bulkLoadKeys(ctx, batches...)
	if err != nil {
		return err
	}
	r.scaleLoaded = true
	name := fmt.Sprintf("load %s finished keys", count(r.sz.scaleKeys))
	if withExpired {
		name += fmt.Sprintf(" + %s expired", count(r.sz.expiredKeys))
	}
	r.add(Figure{Step: "5 scale", Name: name, Value: times.total().Seconds(), Unit: "s",
		Note: fmt.Sprintf("%s; %.0f keys/s", times, float64(total)/times.total().Seconds())})
	if withExpired {
		d, err := r.addExpiredRides(ctx)
		if err != nil {
			return err
		}
		r.expiredDone = true
		r.add(Figure{Step: "5 scale", Name: fmt.Sprintf("rides for the %s expired keys", count(r.sz.expiredKeys)),
			Value: d.Seconds(), Unit: "s", Note: "so that reaping a key clears its ride's reference, as in production"})
	}
	var size string
	if err := r.db.QueryRow(ctx, `SELECT pg_size_pretty(pg_total_relation_size('idempotency_keys'))`).Scan(&size); err != nil {
		return err
	}
	r.logf("  idempotency_keys is %s with its indexes", size)

	res, err := r.measured(ctx, fmt.Sprintf("api new rides, 32 clients, %s keys", count(total)),
		r.rideLoad("scale32", 32, r.apiURLs[:1], false))
	if err != nil {
		return err
	}
	r.scaleNew = &res
	fig := loadFigure("5 scale", fmt.Sprintf("new rides, %s keys in table", count(total)), res, "rides/s")
	if n, ok := r.newRides[32]; ok && n.Rate > 0 {
		fig.Ratio, fig.RatioOf = res.Rate/n.Rate, "empty table"
	}
	r.add(fig)

	live := r.liveBatch()
	replays := Load{
		Clients: 32, Warmup: r.sz.warmup, Duration: r.sz.step,
		Request: func(c, n int) (*http.Request, error) { return newRide(r.apiURLs[0], live.seededKey()) },
		Check:   replayed,
	}
	replayRes, err := r.measured(ctx, fmt.Sprintf("api replays, 32 clients, %s keys", count(total)), replays)
	if err != nil {
		return err
	}
	r.scaleReplay = &replayRes
	fig = loadFigure("5 scale", fmt.Sprintf("replays, random of %s keys", count(live.count*3/5)), replayRes, "responses/s")
	if r.replays != nil && r.replays.Rate > 0 {
		fig.Ratio, fig.RatioOf = replayRes.Rate/r.replays.Rate, "empty table"
	}
	fig.Note = strings.TrimPrefix(fig.Note+"; table "+size, "; ")
	r.add(fig)

	return r.explain(ctx, live, total)
}

// count renders a row count: 5M, 100k.
func count(n int64) string {
	switch {
	case n >= 1_000_000 && n%100_000 == 0:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/1e6), ".0") + "M"
	case n >= 1000 && n%100 == 0:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/1e3), ".0") + "k"
	default:
		return fmt.Sprint(n)
	}
}

// keyColumns are idempotency_keys' columns as internal/idem reads them.
const keyColumns = `id, created_at, idempotency_key, last_run_at, locked_at, lock_token,
	request_method, request_params, request_path, origin_ip,
	response_code, response_body, recovery_point, user_id,
	first_foreign_attempt_at, unknown_outcomes, attention_reason`

// claimSQL is internal/idem's claim: a new key inserted locked, or a
// finished key of the same request read back for a replay.
const claimSQL = `WITH inserted AS (
	INSERT INTO idempotency_keys
		(user_id, idempotency_key, request_method, request_path, request_params,
		 origin_ip, recovery_point, locked_at, lock_token)
	SELECT $1::bigint, $2::text, $3::text, $4::text, $5::jsonb, $6::inet, 'started', now(), $7::uuid
	WHERE NOT EXISTS (
		SELECT 1 FROM reaped_keys WHERE user_id = $1::bigint AND idempotency_key = $2::text)
	ON CONFLICT (user_id, idempotency_key) DO NOTHING
	RETURNING ` + keyColumns + `
)
SELECT ` + keyColumns + `, true AS inserted FROM inserted
UNION ALL
SELECT ` + keyColumns + `, false FROM idempotency_keys
WHERE user_id = $1 AND idempotency_key = $2
  AND recovery_point = 'finished'
  AND request_method = $3 AND request_path = $4 AND request_params = $5::jsonb`

// explain runs EXPLAIN (ANALYZE, BUFFERS) on the hot statements, each as
// the api sends it, in a transaction that is rolled back.
func (r *run) explain(ctx context.Context, live keyBatch, keys int64) error {
	tx, err := r.db.Begin(ctx)
	if err != nil {
		return err
	}
	// Everything explained is thrown away; a failed rollback ends with
	// the connection.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	newKey := r.key("explain", 0, 0)
	existing := live.seededKey()
	params := rideParams.Canonical()
	var (
		keyID int64
		token uuid.UUID
	)
	steps := []struct {
		name, sql string
		args      func() []any
		after     func() error
	}{
		{
			name: "claim, new key (idem.Claim)",
			sql:  claimSQL,
			args: func() []any { return []any{r.userID, newKey, "POST", "/rides", params, "127.0.0.1", uuid.New()} },
			after: func() error {
				return tx.QueryRow(ctx, `SELECT id, lock_token FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2`,
					r.userID, newKey).Scan(&keyID, &token)
			},
		},
		{
			name: "fence, phase started -> ride_created (idem.Phase)",
			sql: `SELECT NOT EXISTS (
	SELECT 1 FROM reaped_keys r
	WHERE $3 = 'started' AND r.user_id = k.user_id AND r.idempotency_key = k.idempotency_key)
FROM idempotency_keys k
WHERE id = $1 AND lock_token = $2 AND recovery_point = $3
FOR UPDATE OF k`,
			args: func() []any { return []any{keyID, token, "started"} },
		},
		{
			name: "ride INSERT (rides.insertRide)",
			sql: `INSERT INTO rides (idempotency_key_id, origin_lat, origin_lon, target_lat, target_lon,
	amount, currency, user_id, status)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'pending')
RETURNING id`,
			args: func() []any {
				return []any{keyID, rideParams.OriginLat, rideParams.OriginLon, rideParams.TargetLat, rideParams.TargetLon, 2000, "usd", r.userID}
			},
		},
		{
			name: "new recovery point, started -> ride_created (idem.Phase)",
			sql: `UPDATE idempotency_keys
SET recovery_point = $4,
    response_code  = $5,
    response_body  = $6,
    locked_at      = CASE WHEN $4 = 'finished' THEN NULL ELSE now() END,
    lock_token     = CASE WHEN $4 = 'finished' THEN NULL ELSE lock_token END,
    first_foreign_attempt_at = CASE WHEN $7 THEN coalesce(first_foreign_attempt_at, now())
                                    ELSE first_foreign_attempt_at END,
    resource_id    = coalesce($8, resource_id)
WHERE id = $1 AND lock_token = $2 AND recovery_point = $3
RETURNING response_body, first_foreign_attempt_at`,
			args: func() []any { return []any{keyID, token, "started", "ride_created", nil, nil, true, int64(1)} },
		},
		{
			name: "ride by key SELECT (rides.rideByKey)",
			sql: `SELECT id, created_at, status, origin_lat::float8, origin_lon::float8, target_lat::float8,
	target_lon::float8, amount, currency, stripe_charge_id, user_id, idempotency_key_id
FROM rides WHERE idempotency_key_id = $1::bigint`,
			args: func() []any { return []any{keyID} },
		},
		{
			name: "claim, finished key: the whole replay (idem.Claim)",
			sql:  claimSQL,
			args: func() []any { return []any{r.userID, existing, "POST", "/rides", params, "127.0.0.1", uuid.New()} },
		},
		{
			name: "SELECT ... FOR UPDATE of idem.claimExisting (in-flight, abandoned or mismatched keys only)",
			sql: `SELECT id, created_at, idempotency_key, last_run_at, locked_at, lock_token,
	request_method, request_params, request_path, origin_ip,
	response_code, response_body, recovery_point, user_id,
	first_foreign_attempt_at, unknown_outcomes, attention_reason,
	request_method = $3 AND request_path = $4 AND request_params = $5::jsonb,
	coalesce(locked_at > now() - $6::interval, false)
FROM idempotency_keys
WHERE user_id = $1 AND idempotency_key = $2
FOR UPDATE`,
			args: func() []any { return []any{r.userID, existing, "POST", "/rides", params, 90 * time.Second} },
		},
		{
			name: "reaper batch SELECT (the subquery of idem.Reap)",
			sql: `SELECT id
FROM idempotency_keys
WHERE created_at < now() - $1::interval
  AND (locked_at IS NULL OR locked_at < now() - $3::interval)
ORDER BY id
LIMIT $2
FOR UPDATE SKIP LOCKED`,
			args: func() []any { return []any{reaperMaxAge, 1000, 90 * time.Second} },
		},
	}
	for _, s := range steps {
		rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+s.sql, s.args()...)
		if err != nil {
			return fmt.Errorf("explain %s: %w", s.name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("explain %s: %w", s.name, err)
		}
		r.report.Findings.Explain = append(r.report.Findings.Explain, Explain{
			Name: fmt.Sprintf("%s, %s keys", s.name, count(keys)), Statement: s.sql, Plan: strings.Join(lines, "\n"),
		})
		if s.after != nil {
			if err := s.after(); err != nil {
				return fmt.Errorf("after explain %s: %w", s.name, err)
			}
		}
	}
	return nil
}

// group runs functions concurrently and returns the first error.
type group struct {
	wg  sync.WaitGroup
	mu  sync.Mutex
	err error
}

func (g *group) Go(fn func() error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := fn(); err != nil {
			g.mu.Lock()
			if g.err == nil {
				g.err = err
			}
			g.mu.Unlock()
		}
	}()
}

func (g *group) Wait() error {
	g.wg.Wait()
	return g.err
}

// tableStats records how many of each table's updates were HOT: an update
// that changes no indexed column (nor one an index predicate reads) and
// finds room on its page writes no index entries.
func (r *run) tableStats(ctx context.Context) {
	rows, err := r.db.Query(ctx, `
		SELECT relname, n_tup_upd, n_tup_hot_upd, pg_size_pretty(pg_total_relation_size(relid))
		FROM pg_stat_user_tables
		WHERE relname IN ('idempotency_keys', 'rides')
		ORDER BY relname`)
	if err != nil {
		r.logf("read table stats: %v", err)
		return
	}
	stats, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TableStat, error) {
		var s TableStat
		return s, row.Scan(&s.Table, &s.Updates, &s.HOTUpdates, &s.Size)
	})
	if err != nil {
		r.logf("read table stats: %v", err)
		return
	}
	r.report.Findings.TableStats = stats

	rows, err = r.db.Query(ctx, `
		SELECT indexrelname, idx_scan, idx_tup_read, pg_size_pretty(pg_relation_size(indexrelid))
		FROM pg_stat_user_indexes
		WHERE relname = 'idempotency_keys'
		ORDER BY indexrelname`)
	if err != nil {
		r.logf("read index stats: %v", err)
		return
	}
	indexes, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (IndexStat, error) {
		var s IndexStat
		return s, row.Scan(&s.Index, &s.Scans, &s.TuplesRead, &s.Size)
	})
	if err != nil {
		r.logf("read index stats: %v", err)
		return
	}
	r.report.Findings.IndexStats = indexes
}
