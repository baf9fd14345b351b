package idem_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
)

// A key's steps tell its story: who took which step, on which attempt.
func TestSteps(t *testing.T) {
	t.Parallel()
	forEachPath(t, testSteps)
}

func testSteps(t *testing.T, plain bool) {
	type testBundle struct {
		pool                   *pgxpool.Pool
		api, completer, person *idem.Store
		req                    idem.Request
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		pool := dbtest.New(t)
		var userID int64
		require.NoError(t, pool.QueryRow(context.Background(), `
			INSERT INTO users (email, stripe_customer_id, api_token_hash)
			VALUES ('steps@example.com', 'cus_steps', sha256('t'))
			RETURNING id`).Scan(&userID))
		store := func(actor string) *idem.Store {
			s, err := idem.New(&idem.Config{Pool: pool, LockTimeout: time.Minute, Actor: actor, Plain: plain})
			require.NoError(t, err)
			return s
		}
		return &testBundle{
			pool: pool, api: store(""), completer: store("completer"), person: store("console"),
			req: idem.Request{
				UserID: userID, Key: uuid.NewString(), Method: "POST", Path: "/rides",
				Params: []byte(`{"a": 1}`), OriginIP: netip.MustParseAddr("192.0.2.1"),
			},
		}
	}
	advance := func(next idem.RecoveryPoint) idem.PhaseFunc {
		return func(_ context.Context, tx *idem.Tx) error { tx.Move(idem.Advance(next)); return nil }
	}
	type step struct {
		event   idem.StepEvent
		point   idem.RecoveryPoint
		actor   string
		attempt int
	}
	steps := func(t *testing.T, s *idem.Store, id int64) []step {
		t.Helper()
		all, err := s.Steps(context.Background(), id)
		require.NoError(t, err)
		out := make([]step, len(all))
		for i, st := range all {
			out[i] = step{st.Event, st.RecoveryPoint, st.Actor, st.Attempt}
		}
		return out
	}

	t.Run("RecordsClaimsPhasesUnlocksAndTakeovers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		key, _, err := b.api.Claim(ctx, b.req)
		require.NoError(t, err)
		require.NoError(t, b.api.Phase(ctx, key, advance(halfway)))
		require.NoError(t, b.api.Unlock(ctx, key))

		again, _, err := b.api.Claim(ctx, b.req)
		require.NoError(t, err)
		require.Equal(t, 2, again.Claims)
		// The retry stalls; its lock goes stale and the completer takes
		// the key over.
		_, err = b.pool.Exec(ctx, `UPDATE idempotency_keys SET locked_at = now() - interval '2 minutes',
			last_run_at = now() - interval '2 minutes', created_at = now() - interval '1 hour' WHERE id = $1`, key.ID)
		require.NoError(t, err)
		claimed, err := b.completer.ClaimAbandoned(ctx, time.Minute, time.Minute, 10)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		require.ErrorIs(t, b.api.Phase(ctx, again, advance(idem.Finished)), idem.ErrLockLost, "the stalled retry is fenced off")
		require.NoError(t, b.completer.Phase(ctx, claimed[0], func(_ context.Context, tx *idem.Tx) error {
			tx.Move(idem.Respond(201, []byte(`{}`)))
			return nil
		}))

		require.Equal(t, []step{
			{idem.StepClaimed, idem.Started, "api", 1},
			{idem.StepReached, halfway, "api", 1},
			{idem.StepUnlocked, halfway, "api", 1},
			{idem.StepResumed, halfway, "api", 2},
			{idem.StepTookOver, halfway, "completer", 3},
			{idem.StepReached, idem.Finished, "completer", 3},
		}, steps(t, b.api, key.ID))
	})

	t.Run("RecordsSetAsideAndReopen", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		key, _, err := b.api.Claim(ctx, b.req)
		require.NoError(t, err)
		n, err := b.api.RecordUnknownOutcome(ctx, key)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.NoError(t, b.api.Phase(ctx, key, func(_ context.Context, tx *idem.Tx) error {
			tx.Move(idem.SetAside("look at Stripe"))
			return nil
		}))

		taken, err := b.person.ClaimByID(ctx, key.ID, nil)
		require.NoError(t, err)
		require.NoError(t, b.person.Reopen(ctx, taken, nil))
		row, err := b.api.KeyByID(ctx, key.ID)
		require.NoError(t, err)
		require.Nil(t, row.AttentionReason)
		require.Zero(t, row.UnknownOutcomes, "a fresh budget for the next attempts")
		require.Nil(t, row.LockedAt)

		all, err := b.api.Steps(ctx, key.ID)
		require.NoError(t, err)
		require.Equal(t, []step{
			{idem.StepClaimed, idem.Started, "api", 1},
			{idem.StepUnknownOutcome, idem.Started, "api", 1},
			{idem.StepSetAside, idem.Started, "api", 1},
			{idem.StepResumed, idem.Started, "console", 2},
			{idem.StepReopened, idem.Started, "console", 2},
		}, steps(t, b.api, key.ID))
		require.Equal(t, "look at Stripe", *all[2].Detail)
	})

	t.Run("ClaimByIDRefusesLiveLockAndFinishedKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		key, _, err := b.api.Claim(ctx, b.req)
		require.NoError(t, err)
		_, err = b.person.ClaimByID(ctx, key.ID, nil)
		require.ErrorIs(t, err, idem.ErrInFlight)
		require.NoError(t, b.api.Phase(ctx, key, func(_ context.Context, tx *idem.Tx) error {
			tx.Move(idem.Respond(201, []byte(`{}`)))
			return nil
		}))
		_, err = b.person.ClaimByID(ctx, key.ID, nil)
		require.ErrorIs(t, err, idem.ErrKeyFinished)
		_, err = b.person.ClaimByID(ctx, key.ID+1000, nil)
		require.ErrorIs(t, err, idem.ErrKeyNotFound)
	})

	// A person's claim that check refuses writes nothing: no claim, no
	// step, and whoever held a stale lock is not fenced off.
	t.Run("ClaimByIDRefusedByItsCheckWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		key, _, err := b.api.Claim(ctx, b.req)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `UPDATE idempotency_keys SET locked_at = now() - interval '2 minutes' WHERE id = $1`, key.ID)
		require.NoError(t, err)
		refused := errors.New("not this one")
		_, err = b.person.ClaimByID(ctx, key.ID, func(*idem.Key) error { return refused })
		require.ErrorIs(t, err, refused)
		row, err := b.api.KeyByID(ctx, key.ID)
		require.NoError(t, err)
		require.Equal(t, 1, row.Claims)
		require.Equal(t, key.LockToken, row.LockToken, "the holder keeps its lock")
		require.Equal(t, []step{{idem.StepClaimed, idem.Started, "api", 1}}, steps(t, b.api, key.ID))
	})

	// A key claimed and released over and over (a completer retrying it
	// through an outage) keeps its first step and its latest, at most
	// MaxSteps of them.
	t.Run("KeepsAtMostMaxSteps", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		key, _, err := b.api.Claim(ctx, b.req)
		require.NoError(t, err)
		for range idem.MaxSteps {
			require.NoError(t, b.api.Unlock(ctx, key))
			key, _, err = b.api.Claim(ctx, b.req)
			require.NoError(t, err)
		}
		got := steps(t, b.api, key.ID)
		require.Len(t, got, idem.MaxSteps)
		require.Equal(t, step{idem.StepClaimed, idem.Started, "api", 1}, got[0], "how the request began")
		require.Equal(t, step{idem.StepResumed, idem.Started, "api", idem.MaxSteps + 1}, got[len(got)-1], "the latest claim")
		require.Equal(t, step{idem.StepUnlocked, idem.Started, "api", idem.MaxSteps}, got[len(got)-2])
	})

	t.Run("RefusesBadActor", func(t *testing.T) {
		t.Parallel()
		_, err := idem.New(&idem.Config{Pool: &pgxpool.Pool{}, Actor: "Bad Actor"})
		require.Error(t, err)
		require.Contains(t, err.Error(), "Config.Actor")
		require.False(t, errors.Is(err, idem.ErrInFlight))
	})
}
