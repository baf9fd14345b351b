package idem_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/idem"
)

// TestPhaseGuarded pins a guard sent ahead of a phase (the ride's charge
// cap is one): one round trip for both, a transaction of its own that
// commits whatever the phase does, and a raise that leaves the phase
// unsent.
func TestPhaseGuarded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	tr := newTraced(t, "guard")
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
	require.NoError(t, store.PhaseGuarded(ctx, claim("warm-up"), counting, phase)) // prepares the statements

	t.Run("SendsTheGuardAndThePhaseInOneRoundTrip", func(t *testing.T) {
		key := claim("one-trip")
		counter.Reset()
		require.NoError(t, store.PhaseGuarded(ctx, key, counting, phase))
		require.Equal(t, int64(1), counter.Total(), "round trips of the guard and the phase")
		require.Equal(t, idem.RecoveryPoint("halfway"), key.RecoveryPoint)
	})

	t.Run("CommitsTheGuardOnItsOwn", func(t *testing.T) {
		key := claim("phase-fails")
		guards, phases := jobs("guard"), jobs("phase")
		require.ErrorContains(t, store.PhaseGuarded(ctx, key, counting, failing), "the phase fails")
		require.Equal(t, guards+1, jobs("guard"), "the guard committed before the phase began")
		require.Equal(t, phases, jobs("phase"), "the phase rolled back")
		require.Equal(t, idem.Started, key.RecoveryPoint)
	})

	t.Run("ARaiseLeavesThePhaseUnsent", func(t *testing.T) {
		key := claim("refused")
		phases := jobs("phase")
		err := store.PhaseGuarded(ctx, key, refusing, phase)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "the guard's own error: %v", err)
		require.Equal(t, "22012", pgErr.Code, "division_by_zero")
		require.Equal(t, phases, jobs("phase"), "nothing of the phase ran")
		require.Equal(t, idem.Started, key.RecoveryPoint)
		// The connection is usable again: the guard's transaction was
		// rolled back.
		require.NoError(t, store.PhaseGuarded(ctx, key, nil, phase))
		require.Equal(t, idem.RecoveryPoint("halfway"), key.RecoveryPoint)
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
