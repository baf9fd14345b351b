package idem_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
)

// traced is a store, on the plain path or the fast one, on a pool of one
// connection whose round trips are counted (one connection, so its
// statement cache is warm after the first use), with a user of its own.
type traced struct {
	pool    *pgxpool.Pool
	store   *idem.Store
	counter *dbtest.RoundTrips
	userID  int64
}

func newTraced(t testing.TB, name string, plain bool) *traced {
	t.Helper()
	ctx := context.Background()
	tr := &traced{}
	tr.pool, tr.counter = dbtest.NewCounted(t, 1)
	require.NoError(t, tr.pool.QueryRow(ctx, `
		INSERT INTO users (email, stripe_customer_id, api_token_hash)
		VALUES ($1 || '@example.com', 'cus_' || $1, sha256('t')) RETURNING id`, name).Scan(&tr.userID))
	var err error
	tr.store, err = idem.New(&idem.Config{Pool: tr.pool, LockTimeout: time.Minute, Plain: plain})
	require.NoError(t, err)
	return tr
}

// claim claims key for a POST /rides of the traced user.
func (tr *traced) claim(t testing.TB, key string) *idem.Key {
	t.Helper()
	k, _, err := tr.store.Claim(context.Background(), idem.Request{UserID: tr.userID, Key: key, Method: "POST", Path: "/rides",
		Params: []byte(`{}`), OriginIP: netip.MustParseAddr("192.0.2.1")})
	require.NoError(t, err)
	return k
}

// TestPhaseRoundTrips pins what an atomic phase costs on the wire. On the
// fast path the fence raises rather than answers, so BEGIN, the fence,
// the phase's writes, the new recovery point and COMMIT go out together,
// one round trip; a phase that needs an answer on the way (Flush) pays
// one more. The move to the new recovery point is the fence, a statement
// of its own only in a phase that reads on the way. On the plain path
// every statement is a round trip of its own, the fence always one.
func TestPhaseRoundTrips(t *testing.T) {
	t.Parallel()
	forEachPath(t, testPhaseRoundTrips)
}

func testPhaseRoundTrips(t *testing.T, plain bool) {
	ctx := context.Background()

	tr := newTraced(t, "trips", plain)
	store, counter := tr.store, tr.counter
	claim := func(key string) *idem.Key { return tr.claim(t, key) }

	writeOnly := func(next idem.RecoveryPoint) idem.PhaseFunc {
		return func(_ context.Context, tx *idem.Tx) error {
			tx.Move(idem.Advance(next))
			tx.Queue(`INSERT INTO staged_jobs (job_name, job_args) VALUES ('trip', '{}')`)
			tx.Queue(`INSERT INTO staged_jobs (job_name, job_args) VALUES ('trip', '{}')`)
			return nil
		}
	}
	readThenWrite := func(ctx context.Context, tx *idem.Tx) error {
		var n int
		tx.Queue(`SELECT count(*) FROM staged_jobs`).QueryRow(func(row pgx.Row) error { return row.Scan(&n) })
		if err := tx.Flush(ctx); err != nil {
			return err
		}
		tx.Move(idem.Respond(201, []byte(`{"jobs": 4}`)))
		tx.Queue(`INSERT INTO staged_jobs (job_name, job_args) VALUES ('trip', '{}')`)
		return nil
	}

	run := func(key *idem.Key) {
		t.Helper()
		require.NoError(t, store.Phase(ctx, key, writeOnly("halfway")))
		require.NoError(t, store.Phase(ctx, key, writeOnly("almost_done")))
		require.NoError(t, store.Phase(ctx, key, readThenWrite))
	}
	run(claim("warm-up")) // prepares every statement once

	key := claim("measured")
	for _, phase := range []struct {
		fn                idem.PhaseFunc
		trips, statements int64 // on the fast path
		plain             int64 // round trips on the plain path, one a statement
	}{
		{writeOnly("halfway"), 1, 5, 6},     // BEGIN, the move, two inserts, COMMIT; the fence apart on the plain path
		{writeOnly("almost_done"), 1, 5, 6}, // the same
		{readThenWrite, 2, 6, 6},            // BEGIN, the fence, the read; the move, the insert, COMMIT
	} {
		from := key.RecoveryPoint
		counter.Reset()
		require.NoError(t, store.Phase(ctx, key, phase.fn))
		if plain {
			require.Equal(t, phase.plain, counter.Total(), "round trips of the phase from %s", from)
			require.Zero(t, counter.Batches.Load(), "nothing pipelined")
			continue
		}
		require.Equal(t, phase.trips, counter.Total(), "round trips of the phase from %s", from)
		require.Equal(t, phase.statements, counter.Batched.Load(), "statements of the phase from %s", from)
		require.Zero(t, counter.Queries.Load(), "statements sent on their own")
	}
	require.Equal(t, idem.Finished, key.RecoveryPoint)
}

// TestClaimRoundTrips pins what the claim of a new key costs: one round
// trip on the fast path, the reaped keys' guard included; on the plain
// path three, BEGIN, the insert and COMMIT.
func TestClaimRoundTrips(t *testing.T) {
	t.Parallel()
	forEachPath(t, testClaimRoundTrips)
}

func testClaimRoundTrips(t *testing.T, plain bool) {
	ctx := context.Background()

	tr := newTraced(t, "trips", plain)
	pool, store, counter, userID := tr.pool, tr.store, tr.counter, tr.userID
	// Records of reaped keys exist, and one of them is this user's.
	_, err := pool.Exec(ctx, `
		INSERT INTO reaped_keys (user_id, idempotency_key, idempotency_key_id, request_method, request_path,
		                         request_params_sha256, created_at)
		VALUES ($1, 'reaped', 1, 'POST', '/rides', sha256(''), now() - interval '4 days')`, userID)
	require.NoError(t, err)
	claim := func(key string) error {
		_, _, err := store.Claim(ctx, idem.Request{UserID: userID, Key: key, Method: "POST", Path: "/rides",
			Params: []byte(`{}`), OriginIP: netip.MustParseAddr("192.0.2.1")})
		return err
	}
	require.NoError(t, claim("warm-up")) // prepares the statement

	counter.Reset()
	require.NoError(t, claim("measured"))
	want := int64(1)
	if plain {
		want = 3
	}
	require.Equal(t, want, counter.Total(), "round trips of a new key's claim")

	require.ErrorIs(t, claim("reaped"), idem.ErrKeyReused, "the guard holds: another request under a reaped key")
}

// TestPhaseThen pins two atomic phases with no foreign call between them:
// one round trip on the fast path, two commits, and a second that fails
// leaves the first committed on its own. The plain path runs them one
// after the other, to the same end.
func TestPhaseThen(t *testing.T) {
	t.Parallel()
	forEachPath(t, testPhaseThen)
}

func testPhaseThen(t *testing.T, plain bool) {
	ctx := context.Background()

	tr := newTraced(t, "then", plain)
	pool, store, counter := tr.pool, tr.store, tr.counter
	claim := func(key string) *idem.Key { return tr.claim(t, key) }
	job := func(next idem.Outcome) idem.PhaseFunc {
		return func(_ context.Context, tx *idem.Tx) error {
			tx.Move(next)
			tx.Queue(`INSERT INTO staged_jobs (job_name, job_args) VALUES ('then', '{}')`)
			return nil
		}
	}
	jobs := func() (n int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM staged_jobs`).Scan(&n))
		return n
	}
	points := func(key *idem.Key) []idem.RecoveryPoint {
		steps, err := store.Steps(ctx, key.ID)
		require.NoError(t, err)
		var out []idem.RecoveryPoint
		for _, s := range steps {
			out = append(out, s.RecoveryPoint)
		}
		return out
	}
	require.NoError(t, store.PhaseThen(ctx, claim("warm-up"), job(idem.Advance("halfway")),
		job(idem.Respond(201, []byte(`{}`)))))

	key := claim("measured")
	counter.Reset()
	require.NoError(t, store.PhaseThen(ctx, key, job(idem.Advance("halfway")), job(idem.Respond(201, []byte(`{}`)))))
	if !plain {
		require.Equal(t, int64(1), counter.Total(), "round trips of the two phases")
	}
	require.Equal(t, idem.Finished, key.RecoveryPoint)
	require.Equal(t, []idem.RecoveryPoint{idem.Started, "halfway", idem.Finished}, points(key), "a commit for each recovery point")

	before := jobs()
	key = claim("second-fails")
	err := store.PhaseThen(ctx, key, job(idem.Advance("halfway")), func(_ context.Context, tx *idem.Tx) error {
		tx.Move(idem.Respond(201, []byte(`{}`)))
		tx.Queue(`INSERT INTO staged_jobs (job_name, job_args) VALUES ('then', '{}')`)
		tx.Queue(`
			WITH changed AS (DELETE FROM staged_jobs WHERE job_name = 'none' RETURNING 1)
			SELECT idempotency_key_phase_check(count(*) = 1, 'no such job') FROM changed`)
		return nil
	})
	require.ErrorContains(t, err, "no such job")
	require.Equal(t, idem.RecoveryPoint("halfway"), key.RecoveryPoint, "the first committed on its own")
	require.Equal(t, before+1, jobs(), "the second's writes rolled back")
}

// TestQueueAfterCommit pins what goes behind a phase's COMMIT (the
// enqueuer's wake): it runs only once the phase has committed, in a
// transaction of its own, and its failure fails nothing that committed;
// it is logged.
func TestQueueAfterCommit(t *testing.T) {
	t.Parallel()
	forEachPath(t, testQueueAfterCommit)
}

func testQueueAfterCommit(t *testing.T, plain bool) {
	ctx := context.Background()

	tr := newTraced(t, "after", plain)
	var logs bytes.Buffer
	store, err := idem.New(&idem.Config{Pool: tr.pool, LockTimeout: time.Minute, Plain: plain,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	jobs := func(name string) (n int) {
		require.NoError(t, tr.pool.QueryRow(ctx, `SELECT count(*) FROM staged_jobs WHERE job_name = $1`, name).Scan(&n))
		return n
	}
	phase := func(check, after string, next idem.Outcome) idem.PhaseFunc {
		return func(_ context.Context, tx *idem.Tx) error {
			tx.Move(next)
			tx.Queue(`INSERT INTO staged_jobs (job_name, job_args) VALUES ('phase', '{}')`)
			tx.Queue(`SELECT idempotency_key_phase_check($1, 'the phase fails')`, check == "ok")
			tx.QueueAfterCommit(after)
			return nil
		}
	}
	const behind = `INSERT INTO staged_jobs (job_name, job_args) VALUES ('behind', '{}')`

	key := tr.claim(t, "committed")
	require.NoError(t, store.Phase(ctx, key, phase("ok", behind, idem.Advance("halfway"))))
	require.Equal(t, 1, jobs("behind"), "sent behind the commit")

	key = tr.claim(t, "fails")
	require.ErrorContains(t, store.Phase(ctx, key, phase("no", behind, idem.Advance("halfway"))), "the phase fails")
	require.Equal(t, 1, jobs("behind"), "not sent behind a phase that did not commit")

	require.Empty(t, logs.String())
	key = tr.claim(t, "behind-fails")
	require.NoError(t, store.Phase(ctx, key, phase("ok", `SELECT 1/0`, idem.Advance("halfway"))))
	require.Equal(t, idem.RecoveryPoint("halfway"), key.RecoveryPoint)
	var stored idem.RecoveryPoint
	require.NoError(t, tr.pool.QueryRow(ctx, `SELECT recovery_point FROM idempotency_keys WHERE id = $1`, key.ID).Scan(&stored))
	require.Equal(t, idem.RecoveryPoint("halfway"), stored, "the phase committed, in a transaction of its own")
	require.Contains(t, logs.String(), "A statement sent behind a committed phase failed")
	require.Contains(t, logs.String(), "division by zero")

	// The same behind the second of two phases in one pipeline.
	logs.Reset()
	key = tr.claim(t, "then-behind-fails")
	require.NoError(t, store.PhaseThen(ctx, key, phase("ok", behind, idem.Advance("halfway")),
		phase("ok", `SELECT 1/0`, idem.Respond(201, []byte(`{}`)))))
	require.Equal(t, idem.Finished, key.RecoveryPoint)
	require.Contains(t, logs.String(), "division by zero")
}

// BenchmarkRidePhases measures what the store costs the process for the
// phases of a new ride, shaped as a ride's are: the claim, one phase with
// two writes, then two phases with a write each in one pipeline. Postgres
// answers on the same machine, so ns/op is mostly waiting; allocs/op and
// B/op are the process's own.
func BenchmarkRidePhases(b *testing.B) {
	ctx := context.Background()
	tr := newTraced(b, "bench", false)
	write := func(next idem.RecoveryPoint, writes int) idem.PhaseFunc {
		return func(_ context.Context, tx *idem.Tx) error {
			if next == idem.Finished {
				tx.Move(idem.Respond(201, []byte(`{"ride": 1}`)))
			} else {
				tx.Move(idem.Advance(next))
			}
			for range writes {
				tx.Queue(`INSERT INTO staged_jobs (job_name, job_args) VALUES ('bench', '{}')`)
			}
			return nil
		}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		key := tr.claim(b, fmt.Sprintf("ride-%d", i))
		if err := tr.store.Phase(ctx, key, write("halfway", 2)); err != nil {
			b.Fatal(err)
		}
		if err := tr.store.PhaseThen(ctx, key, write("almost_done", 1), write(idem.Finished, 1)); err != nil {
			b.Fatal(err)
		}
	}
}
