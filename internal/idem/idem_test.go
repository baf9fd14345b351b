package idem_test

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
)

// halfway is a recovery point of this test's own endpoint: every endpoint
// declares its points between Started and Finished, and the schema takes
// them without knowing them.
const halfway idem.RecoveryPoint = "halfway"

// paths are the store's two ways to Postgres, which the tests of the
// mechanism run both of and hold equal: the fast path, the default, and
// the plain path the first reading shows (Config.Plain).
var paths = []struct {
	name  string
	plain bool
}{{"Fast", false}, {"Plain", true}}

// forEachPath runs test once on each path, as a parallel subtest named
// after it.
func forEachPath(t *testing.T, test func(t *testing.T, plain bool)) {
	t.Helper()
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			test(t, path.plain)
		})
	}
}

func TestStore(t *testing.T) {
	t.Parallel()
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			plain := path.plain
			type testBundle struct {
				pool  *pgxpool.Pool
				store *idem.Store
				req   idem.Request
			}
			setup := func(t *testing.T) *testBundle {
				t.Helper()
				pool := dbtest.New(t)
				var userID int64
				require.NoError(t, pool.QueryRow(context.Background(), `
			INSERT INTO users (email, stripe_customer_id, api_token_hash)
			VALUES ('idem@example.com', 'cus_idem', sha256('t'))
			RETURNING id`).Scan(&userID))
				store, err := idem.New(&idem.Config{Pool: pool, LockTimeout: time.Minute, Plain: plain})
				require.NoError(t, err)
				return &testBundle{
					pool:  pool,
					store: store,
					req: idem.Request{
						UserID:   userID,
						Key:      uuid.NewString(),
						Method:   "POST",
						Path:     "/rides",
						Params:   []byte(`{"a": 1, "b": 2}`),
						OriginIP: netip.MustParseAddr("192.0.2.1"),
					},
				}
			}
			advance := func(next idem.RecoveryPoint) idem.PhaseFunc {
				return func(_ context.Context, tx *idem.Tx) error { tx.Move(idem.Advance(next)); return nil }
			}
			staleLock := func(t *testing.T, b *testBundle, id int64) {
				t.Helper()
				_, err := b.pool.Exec(context.Background(),
					`UPDATE idempotency_keys SET locked_at = now() - interval '2 minutes' WHERE id = $1`, id)
				require.NoError(t, err)
			}
			// takenOver claims b's key, lets its lock go stale and has a retry
			// take the key over: the first claim's key, whose holder is now
			// fenced off, and the retry's.
			takenOver := func(t *testing.T, b *testBundle) (stalled, takeover *idem.Key) {
				t.Helper()
				stalled, _, err := b.store.Claim(context.Background(), b.req)
				require.NoError(t, err)
				staleLock(t, b, stalled.ID)
				takeover, _, err = b.store.Claim(context.Background(), b.req)
				require.NoError(t, err)
				return stalled, takeover
			}

			t.Run("ClaimsNewKeyLocked", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				key, replayed, err := b.store.Claim(context.Background(), b.req)
				require.NoError(t, err)
				require.False(t, replayed)
				require.Equal(t, idem.Started, key.RecoveryPoint)
				require.NotNil(t, key.LockedAt)
				require.NotNil(t, key.LockToken)
			})

			t.Run("ParamsCompareAsJSON", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				key, _, err := b.store.Claim(context.Background(), b.req)
				require.NoError(t, err)
				require.NoError(t, b.store.Unlock(context.Background(), key))

				same := b.req
				same.Params = []byte(`{"b":2.0,"a":1}`)
				again, _, err := b.store.Claim(context.Background(), same)
				require.NoError(t, err)
				require.Equal(t, key.ID, again.ID)
			})

			t.Run("RefusesDifferentRequest", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				_, _, err := b.store.Claim(context.Background(), b.req)
				require.NoError(t, err)
				for _, change := range []func(*idem.Request){
					func(r *idem.Request) { r.Params = []byte(`{"a": 1, "b": 3}`) },
					func(r *idem.Request) { r.Path = "/elsewhere" },
					func(r *idem.Request) { r.Method = "PUT" },
				} {
					req := b.req
					change(&req)
					_, _, err := b.store.Claim(context.Background(), req)
					require.ErrorIs(t, err, idem.ErrKeyReused)
				}
			})

			t.Run("RefusesLiveLock", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				_, _, err := b.store.Claim(context.Background(), b.req)
				require.NoError(t, err)
				_, _, err = b.store.Claim(context.Background(), b.req)
				require.ErrorIs(t, err, idem.ErrInFlight)
			})

			t.Run("TakesOverStaleLockWithNewToken", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				first, _, err := b.store.Claim(context.Background(), b.req)
				require.NoError(t, err)
				staleLock(t, b, first.ID)

				second, replayed, err := b.store.Claim(context.Background(), b.req)
				require.NoError(t, err)
				require.False(t, replayed)
				require.Equal(t, first.ID, second.ID)
				require.NotEqual(t, *first.LockToken, *second.LockToken)
			})

			// The fence from started: a key claimed in the very instant the reaper
			// deleted its predecessor (whose record the claim's guard did not see
			// yet) is refused at its first phase, which writes nothing, and the
			// key is deleted; a key without such a record passes the same fence.
			t.Run("FencesOffAKeyWithAReapedPredecessor", func(t *testing.T) {
				t.Parallel()
				// The fence is the phase's move, or, in a phase that reads on the
				// way, a lock of the key taken ahead of the read: both refuse.
				stage := func(ctx context.Context, tx *idem.Tx) error {
					tx.Move(idem.Advance(halfway))
					tx.Queue(`INSERT INTO staged_jobs (job_name, job_args) VALUES ('fenced', '{}')`)
					return nil
				}
				readThenStage := func(ctx context.Context, tx *idem.Tx) error {
					tx.Queue(`SELECT count(*) FROM staged_jobs`)
					if err := tx.Flush(ctx); err != nil {
						return err
					}
					return stage(ctx, tx)
				}
				for name, phase := range map[string]idem.PhaseFunc{"Moving": stage, "Reading": readThenStage} {
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						b := setup(t)
						ctx := context.Background()
						other := b.req
						other.Key = uuid.NewString()
						passes, _, err := b.store.Claim(ctx, other)
						require.NoError(t, err)
						raced, _, err := b.store.Claim(ctx, b.req)
						require.NoError(t, err)
						_, err = b.pool.Exec(ctx, `
					INSERT INTO reaped_keys (user_id, idempotency_key, idempotency_key_id, request_method, request_path,
					                         request_params_sha256, created_at)
					VALUES ($1, $2, $3 + 1000, 'POST', '/rides', sha256('another request'), now() - interval '4 days')`,
							b.req.UserID, b.req.Key, raced.ID)
						require.NoError(t, err)

						require.ErrorIs(t, b.store.Phase(ctx, raced, phase), idem.ErrKeyReused,
							"refused as the claim refuses another request under a reaped key")
						var keys, jobs int
						require.NoError(t, b.pool.QueryRow(ctx, `
					SELECT (SELECT count(*) FROM idempotency_keys WHERE id = $1), (SELECT count(*) FROM staged_jobs)`,
							raced.ID).Scan(&keys, &jobs))
						require.Zero(t, keys, "the key is retired")
						require.Zero(t, jobs, "the fenced phase wrote nothing")

						require.NoError(t, b.store.Phase(ctx, passes, phase))
						require.Equal(t, halfway, passes.RecoveryPoint)
					})
				}
			})

			// Fencing: the request whose lock was taken over can no longer move
			// the key, even though it still believes it holds it.
			t.Run("FencesOffRequestWhoseLockWasTakenOver", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				ctx := context.Background()
				stalled, takeover := takenOver(t, b)

				wrote := false
				err := b.store.Phase(ctx, stalled, func(ctx context.Context, tx *idem.Tx) error {
					tx.Move(idem.Respond(201, []byte(`{"stalled": true}`)))
					tx.Queue(`INSERT INTO staged_jobs (job_name, job_args) VALUES ('fenced', '{}')`)
					wrote = true
					return nil
				})
				require.ErrorIs(t, err, idem.ErrLockLost)
				require.Equal(t, !plain, wrote, "the fast path sends the phase whole, the plain path its fence first")
				require.Equal(t, idem.Started, stalled.RecoveryPoint, "in-memory key unchanged")

				var n int
				require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM staged_jobs`).Scan(&n))
				require.Zero(t, n, "the fenced phase's writes rolled back")

				// The stalled request's unlock must not release the new owner.
				require.NoError(t, b.store.Unlock(ctx, stalled))
				_, _, err = b.store.Claim(ctx, b.req)
				require.ErrorIs(t, err, idem.ErrInFlight)

				// The new owner proceeds.
				require.NoError(t, b.store.Phase(ctx, takeover, advance(halfway)))
				require.Equal(t, halfway, takeover.RecoveryPoint)
			})

			// A phase that reads on the way cannot open with its move, which it
			// does not know yet: it opens with a lock of the key, and a request
			// whose lock was taken over is fenced off at its first read.
			t.Run("FencesOffAPhaseThatReadsOnTheWay", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				ctx := context.Background()
				stalled, _ := takenOver(t, b)

				read := false
				err := b.store.Phase(ctx, stalled, func(ctx context.Context, tx *idem.Tx) error {
					tx.Queue(`INSERT INTO staged_jobs (job_name, job_args) VALUES ('fenced', '{}')`)
					tx.Queue(`SELECT count(*) FROM staged_jobs`).QueryRow(func(pgx.Row) error { read = true; return nil })
					if err := tx.Flush(ctx); err != nil {
						return err
					}
					tx.Move(idem.Advance(halfway))
					return nil
				})
				require.ErrorIs(t, err, idem.ErrLockLost)
				require.False(t, read, "nothing after the fence ran")
				var n int
				require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM staged_jobs`).Scan(&n))
				require.Zero(t, n, "the fenced phase's writes rolled back")
			})

			// A phase says its move first, and Postgres receives it first: what
			// the writes read of the key is the key as moved. A phase that creates
			// (Creates) relies on it, its insert taking the id the move drew; so
			// one whose move is not its first statement is refused as a bug, with
			// nothing written.
			t.Run("TheMoveRunsAheadOfThePhasesWrites", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				ctx := context.Background()
				key, _, err := b.store.Claim(ctx, b.req)
				require.NoError(t, err)
				require.NoError(t, b.store.Phase(ctx, key, func(_ context.Context, tx *idem.Tx) error {
					tx.Move(idem.Advance(halfway).Creates("staged_jobs_id_seq"))
					tx.Queue(`
				INSERT INTO staged_jobs (id, job_name, job_args)
				SELECT currval('staged_jobs_id_seq'), 'seen', jsonb_build_object('recovery_point', recovery_point::text)
				FROM idempotency_keys WHERE id = $1`, key.ID)
					return nil
				}))
				var seen string
				var named, job int64
				require.NoError(t, b.pool.QueryRow(ctx, `
			SELECT j.job_args->>'recovery_point', k.resource_id, j.id
			FROM staged_jobs j, idempotency_keys k WHERE k.id = $1`, key.ID).Scan(&seen, &named, &job))
				require.Equal(t, string(halfway), seen, "the write ran after the move")
				require.Equal(t, job, named, "the key names what the phase created, by the id its move drew")

				err = b.store.Phase(ctx, key, func(ctx context.Context, tx *idem.Tx) error {
					tx.Queue(`INSERT INTO staged_jobs (job_name, job_args) VALUES ('late', '{}')`)
					if err := tx.Flush(ctx); err != nil {
						return err
					}
					tx.Move(idem.Advance("almost_done").Creates("staged_jobs_id_seq"))
					return nil
				})
				require.ErrorContains(t, err, "bug: ")
				var jobs int
				require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM staged_jobs`).Scan(&jobs))
				require.Equal(t, 1, jobs, "the refused phase wrote nothing")
				require.Equal(t, halfway, key.RecoveryPoint)
			})

			t.Run("PhaseCommitsWritesAndRecoveryPointTogether", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				ctx := context.Background()
				key, _, err := b.store.Claim(ctx, b.req)
				require.NoError(t, err)

				require.NoError(t, b.store.Phase(ctx, key, advance(halfway)))
				err = b.store.Phase(ctx, key, func(ctx context.Context, tx *idem.Tx) error {
					tx.Move(idem.Respond(201, []byte(`{"z": 1, "a": [1, 2]}`)))
					return nil
				})
				require.NoError(t, err)
				require.Equal(t, idem.Finished, key.RecoveryPoint)
				require.Equal(t, 201, key.Response().Code)

				replay, replayed, err := b.store.Claim(ctx, b.req)
				require.NoError(t, err)
				require.True(t, replayed)
				require.Equal(t, string(key.Response().Body), string(replay.Response().Body), "first response and replay are the same bytes")
				require.Nil(t, replay.LockedAt)
			})

			t.Run("ReplayWinsOverStaleLockCheck", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				ctx := context.Background()
				key, _, err := b.store.Claim(ctx, b.req)
				require.NoError(t, err)
				require.NoError(t, b.store.Phase(ctx, key, func(_ context.Context, tx *idem.Tx) error {
					tx.Move(idem.Respond(402, []byte(`{"code": "card_declined"}`)))
					return nil
				}))
				for range 3 {
					replay, replayed, err := b.store.Claim(ctx, b.req)
					require.NoError(t, err)
					require.True(t, replayed)
					require.Equal(t, 402, replay.Response().Code)
				}
			})

			t.Run("UnlockKeepsRecoveryPoint", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				ctx := context.Background()
				key, _, err := b.store.Claim(ctx, b.req)
				require.NoError(t, err)
				require.NoError(t, b.store.Phase(ctx, key, advance(halfway)))
				require.NoError(t, b.store.Unlock(ctx, key))

				resumed, replayed, err := b.store.Claim(ctx, b.req)
				require.NoError(t, err)
				require.False(t, replayed)
				require.Equal(t, halfway, resumed.RecoveryPoint)
			})

			// The table is shared by every endpoint, so its check asks only that a
			// recovery point be a name, and refuses anything else.
			t.Run("SchemaRefusesMalformedRecoveryPoint", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				ctx := context.Background()
				key, _, err := b.store.Claim(ctx, b.req)
				require.NoError(t, err)
				setPoint := func(point string) error {
					_, err := b.pool.Exec(ctx, `UPDATE idempotency_keys SET recovery_point = $2 WHERE id = $1`, key.ID, point)
					return err
				}
				for _, bad := range []string{"", "Halfway", "half way", "1st_phase", "halfway;", strings.Repeat("a", 51)} {
					err := setPoint(bad)
					var pgErr *pgconn.PgError
					require.ErrorAs(t, err, &pgErr, "recovery point %q", bad)
					require.Equal(t, "23514", pgErr.Code, "recovery point %q (want check_violation)", bad)
					require.Equal(t, "recovery_point_check", pgErr.ConstraintName, "recovery point %q", bad)
				}
				for _, good := range []string{"payment_authorized", "step2", strings.Repeat("a", 50)} {
					require.NoError(t, setPoint(good), "recovery point %q", good)
				}
			})

			t.Run("ConcurrentClaimsOneWinner", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				const n = 30
				var (
					wg       sync.WaitGroup
					mu       sync.Mutex
					winners  int
					inFlight int
				)
				for range n {
					wg.Go(func() {
						_, _, err := b.store.Claim(context.Background(), b.req)
						mu.Lock()
						defer mu.Unlock()
						if err == nil {
							winners++
							return
						}
						require.ErrorIs(t, err, idem.ErrInFlight)
						inFlight++
					})
				}
				wg.Wait()
				require.Equal(t, 1, winners)
				require.Equal(t, n-1, inFlight)
			})
		})
	}
}

func TestNew(t *testing.T) {
	t.Parallel()

	t.Run("RefusesABadConfig", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.New(t)
		for want, config := range map[string]*idem.Config{
			"idem: Config is required":                        nil,
			"idem: Config.Pool is required":                   {},
			"idem: Config.LockTimeout must not be negative":   {Pool: pool, LockTimeout: -time.Second},
			"idem: Config.PhaseAttempts must not be negative": {Pool: pool, PhaseAttempts: -1},
		} {
			_, err := idem.New(config)
			require.ErrorContains(t, err, want)
		}
	})

	t.Run("DefaultsZeroFields", func(t *testing.T) {
		t.Parallel()
		store, err := idem.New(&idem.Config{Pool: dbtest.New(t)})
		require.NoError(t, err)
		require.Equal(t, idem.DefaultLockTimeout, store.LockTimeout())
	})
}
