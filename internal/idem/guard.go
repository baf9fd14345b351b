// Second reading: a guard, a statement an endpoint sends ahead of an
// atomic phase (Tx.Guard) that can stop the phase from running: the
// ride's cap on charges (package ratelimit) is one; or ahead of the claim
// (Request.Guard), as the check of a remembered user is (package user).
// And Discard, which deletes a key its request was refused under before
// it did anything.

package idem

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Guard is a statement that can stop a claim or a phase from running: it
// stops it by failing (a raise, a constraint it breaks). On the fast path
// it goes ahead of the claim or the phase, in a transaction of its own
// and in the same round trip: a pipeline skips everything after an error,
// so a guard that fails leaves the claim or the phase unsent, and what it
// wrote commits whatever the phase does. On the plain path it is the
// first statement of the claim's or the phase's transaction (after the
// phase's fence), and commits with it or not at all. A guard that writes
// should write where a commit waits for no WAL flush (an unlogged table),
// or the phase behind it waits for two, and the guard's row locks are
// held through the first.
type Guard struct {
	SQL  string
	Args []any
}

// Guard sends guard, if not nil, ahead of the phase (see Guard); a guard
// that fails fails the phase with its error, and nothing of the phase
// runs. A phase function calls it first, before any statement of its own.
// When Postgres aborts the phase itself for a concurrent transaction, the
// fast path runs the phase again without the guard, which has committed.
func (tx *Tx) Guard(guard *Guard) {
	switch {
	case guard == nil:
	case tx.moved != nil || tx.wrote || (tx.batch != nil && !tx.fencePending):
		tx.fail(fmt.Errorf("bug: phase at %s for key %d sends a guard after its first statement", tx.from, tx.key.ID))
	case tx.batch == nil:
		tx.queued = append(tx.queued, &pgx.QueuedQuery{SQL: guard.SQL, Arguments: guard.Args})
	case !tx.skipGuards:
		// Its BEGIN and COMMIT are explicit, ahead of the phase's BEGIN:
		// a statement sent before the phase's BEGIN in the same pipeline
		// would otherwise be folded into the phase's transaction, and its
		// row locks held until the phase commits.
		tx.batch.QueuedQueries = slices.Insert(tx.batch.QueuedQueries, tx.begin,
			&pgx.QueuedQuery{SQL: `BEGIN`}, &pgx.QueuedQuery{SQL: guard.SQL, Arguments: guard.Args},
			&pgx.QueuedQuery{SQL: `COMMIT`})
		tx.begin += 3
	}
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
