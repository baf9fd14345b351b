// Second reading: a guard, a statement an endpoint sends ahead of an
// atomic phase, in the phase's round trip, that can stop the phase from
// running: the ride's cap on charges (package ratelimit) is one; or ahead
// of the claim, as the check of a remembered user is (package user). And
// Discard, which deletes a key its request was refused under before it did
// anything.

package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rocketrides/rocketrides/internal/platform/db"
)

// Guard is a statement sent ahead of an atomic phase, in a transaction of
// its own that commits before the phase's BEGIN, and in the same round
// trip. It stops the phase by failing (a raise, a constraint it breaks):
// a pipeline skips everything after an error, so a guard that fails
// leaves the phase unsent. What it wrote commits only when it does not
// fail. A guard that writes should write where a commit waits for no WAL
// flush (an unlogged table), or the phase behind it waits for two, and
// the guard's row locks are held through the first.
type Guard struct {
	SQL  string
	Args []any
}

// PhaseGuarded runs fn as Phase does, with guard sent ahead of it in the
// same round trip (see Guard). A guard that fails fails the phase with
// its error, and nothing of the phase runs. When Postgres aborts the
// phase itself for a concurrent transaction, the phase runs again without
// the guard, which has committed. A nil guard is Phase.
func (s *Store) PhaseGuarded(ctx context.Context, key *Key, guard *Guard, fn PhaseFunc) error {
	if guard == nil {
		return s.Phase(ctx, key, fn)
	}
	defer s.metrics.PhaseDone(string(key.RecoveryPoint), time.Now())
	err := s.phaseOnce(ctx, key, guard, fn)
	switch {
	case errors.Is(err, errReapedPredecessor):
		return s.retire(ctx, key)
	case err == nil || !db.IsRetryable(err):
		return err
	}
	return s.retryPhase(ctx, key, fn, 2, err)
}

// ClaimGuarded is Claim with guard sent ahead of the claim's first
// statement, in its round trip and its transaction: a guard that fails
// fails the claim with its error, and nothing is claimed. The api checks
// there that a user it remembered for a token still holds it (package
// user), which saves the token's look-up a round trip of its own. A nil
// guard is Claim.
func (s *Store) ClaimGuarded(ctx context.Context, req Request, guard *Guard) (key *Key, replayed bool, err error) {
	key, replayed, err = s.claimFastGuarded(ctx, req, guard)
	if key != nil || err != nil {
		return key, replayed, err
	}
	// The guard has passed: what is left is decided under the key's row
	// lock, as Claim decides it.
	return s.claimExisting(ctx, req)
}

// queueGuard queues guard on tx in a transaction of its own. Its BEGIN
// and COMMIT are explicit: a statement sent before the phase's BEGIN in
// the same pipeline would otherwise be folded into the phase's
// transaction, and its row locks held until the phase commits.
func (tx *Tx) queueGuard(guard *Guard) {
	tx.batch.Queue(`BEGIN`)
	tx.batch.Queue(guard.SQL, guard.Args...)
	tx.batch.Queue(`COMMIT`)
}

// discardSQL deletes a key ($1) that this request holds (lock token $2)
// at started.
const discardSQL = `
	DELETE FROM idempotency_keys
	WHERE id = $1 AND lock_token = $2 AND recovery_point = 'started'`

// Discard deletes key, which this request holds at started, as though it
// had never been claimed: for a request refused before it did anything,
// whose client was told that nothing was stored on its key. Unlocked
// instead, the key would be resumed by the completer, which would run the
// request the client was told had not run; deleted, a retry with the same
// key starts afresh. A key this request no longer holds, or that has
// moved past started, is left alone.
func (s *Store) Discard(ctx context.Context, key *Key) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, discardSQL, key.ID, key.lockToken()); err != nil {
		return fmt.Errorf("discard idempotency key %d: %w", key.ID, err)
	}
	return nil
}
