package idem_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/idem"
)

// TestPhaseGuarded pins a guard sent ahead of a phase (the ride's charge cap is
// one) or of a claim (the check of a remembered user's token). On the
// fast path it costs no round trip and commits in a transaction of its
// own, whatever the phase does; on the plain path it is the phase's first
// statement after the fence, and commits with the phase. On both a raise
// leaves the phase unsent.
func TestPhaseGuarded(t *testing.T) {
	t.Parallel()
	forEachPath(t, testPhaseGuarded)
}

func testPhaseGuarded(t *testing.T, plain bool) {
	ctx := context.Background()

	tr := newTraced(t, "guard", plain)
	pool, store, counter := tr.pool, tr.store, tr.counter
	claim := func(key string) *idem.Key { return tr.claim(t, key) }
	jobs := func(name string) (n int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM staged_jobs WHERE job_name = $1`, name).Scan(&n))
		return n
	}
	counting := &idem.Guard{SQL: `INSERT INTO staged_jobs (job_name, job_args) VALUES ('guard', '{}')`}
	// Any error stops the phase; the charge cap raises one of its own.
	refusing := &idem.Guard{SQL: `SELECT 1 / 0`}
	phase := func(_ context.Context, tx *idem.Tx) error {
		tx.Move(idem.Advance("halfway"))
		tx.Queue(`INSERT INTO staged_jobs (job_name, job_args) VALUES ('phase', '{}')`)
		return nil
	}
	failing := func(_ context.Context, tx *idem.Tx) error {
		tx.Move(idem.Advance("halfway"))
		tx.Queue(`INSERT INTO staged_jobs (job_name, job_args) VALUES ('phase', '{}')`)
		tx.Queue(`SELECT idempotency_key_phase_check(false, 'the phase fails')`)
		return nil
	}
	guarded := func(guard *idem.Guard, fn idem.PhaseFunc) idem.PhaseFunc {
		return func(ctx context.Context, tx *idem.Tx) error {
			tx.Guard(guard)
			return fn(ctx, tx)
		}
	}
	require.NoError(t, store.Phase(ctx, claim("warm-up"), guarded(counting, phase))) // prepares the statements

	t.Run("SendsTheGuardWithThePhase", func(t *testing.T) {
		key := claim("one-trip")
		counter.Reset()
		require.NoError(t, store.Phase(ctx, key, guarded(counting, phase)))
		if plain {
			require.Equal(t, int64(6), counter.Total(), "BEGIN, the fence, the guard, the move, the insert, COMMIT")
		} else {
			require.Equal(t, int64(1), counter.Total(), "round trips of the guard and the phase")
		}
		require.Equal(t, idem.RecoveryPoint("halfway"), key.RecoveryPoint)
	})

	t.Run("CommitsTheGuardOnItsOwnOnTheFastPath", func(t *testing.T) {
		key := claim("phase-fails")
		guards, phases := jobs("guard"), jobs("phase")
		require.ErrorContains(t, store.Phase(ctx, key, guarded(counting, failing)), "the phase fails")
		if plain {
			require.Equal(t, guards, jobs("guard"), "the guard rolled back with the phase")
		} else {
			require.Equal(t, guards+1, jobs("guard"), "the guard committed before the phase began")
		}
		require.Equal(t, phases, jobs("phase"), "the phase rolled back")
		require.Equal(t, idem.Started, key.RecoveryPoint)
	})

	t.Run("ARaiseLeavesThePhaseUnsent", func(t *testing.T) {
		key := claim("refused")
		phases := jobs("phase")
		err := store.Phase(ctx, key, guarded(refusing, phase))
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "the guard's own error: %v", err)
		require.Equal(t, "22012", pgErr.Code, "division_by_zero")
		require.Equal(t, phases, jobs("phase"), "nothing of the phase ran")
		require.Equal(t, idem.Started, key.RecoveryPoint)
		// The connection is usable again: the guard's transaction was
		// rolled back.
		require.NoError(t, store.Phase(ctx, key, guarded(nil, phase)))
		require.Equal(t, idem.RecoveryPoint("halfway"), key.RecoveryPoint)
	})

	t.Run("AGuardAfterTheFirstStatementIsABug", func(t *testing.T) {
		key := claim("late-guard")
		err := store.Phase(ctx, key, func(ctx context.Context, tx *idem.Tx) error {
			tx.Move(idem.Advance("halfway"))
			tx.Guard(counting)
			return nil
		})
		require.ErrorContains(t, err, "bug: ")
		require.Equal(t, idem.Started, key.RecoveryPoint)
	})

	t.Run("ARaiseLeavesTheClaimUndone", func(t *testing.T) {
		req := idem.Request{UserID: tr.userID, Key: "guarded-claim", Method: "POST", Path: "/rides",
			Params: []byte(`{}`), OriginIP: netip.MustParseAddr("192.0.2.1")}
		refused := req
		refused.Guard = refusing
		_, _, err := store.Claim(ctx, refused)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "the guard's own error: %v", err)
		require.Equal(t, "22012", pgErr.Code, "division_by_zero")
		var keys int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1`, req.Key).Scan(&keys))
		require.Zero(t, keys, "nothing claimed")

		guards := jobs("guard")
		req.Guard = counting
		key, _, err := store.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, idem.Started, key.RecoveryPoint)
		require.Equal(t, guards+1, jobs("guard"))
	})

	t.Run("DiscardDeletesOnlyAKeyItHoldsAtStarted", func(t *testing.T) {
		exists := func(key *idem.Key) (found bool) {
			require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM idempotency_keys WHERE id = $1)`, key.ID).Scan(&found))
			return found
		}
		held := claim("discarded")
		require.NoError(t, store.Discard(ctx, held))
		require.False(t, exists(held))
		// The same key value is new again.
		require.Equal(t, idem.Started, claim("discarded").RecoveryPoint)

		moved := claim("moved-on")
		require.NoError(t, store.Phase(ctx, moved, phase))
		require.NoError(t, store.Discard(ctx, moved))
		require.True(t, exists(moved), "a key past started is left alone")

		released := claim("released")
		require.NoError(t, store.Unlock(ctx, released))
		require.NoError(t, store.Discard(ctx, released))
		require.True(t, exists(released), "a key the request no longer holds is left alone")
	})
}
