// Second reading: the keys the reaper deleted. Each leaves a record in
// reaped_keys (abandoned.go writes it), and a client that comes back with
// such a key is refused, 410, with what became of its request (the ride
// it made, named by the key's resource_id), or 422 if the key now comes
// with another request; the request is never run again. The reaper
// forgets the records after a retention of their own.

package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rocketrides/rocketrides/internal/platform/logctx"
	"github.com/rocketrides/rocketrides/internal/platform/metrics"
)

// ErrKeyExpired means the key's request was made under this key
// before, and the key has since outlived its lifetime and been
// reaped: the request is never run again (see ExpiredError).
var ErrKeyExpired = errors.New("idempotency key expired")

// ExpiredError is the record of a reaped key that a request came back
// with: what became of the request it was first used for. It is
// ErrKeyExpired.
type ExpiredError struct {
	// KeyID is the id the key had.
	KeyID int64
	// CreatedAt is when the key was first used, ReapedAt when the
	// reaper deleted it.
	CreatedAt, ReapedAt time.Time
	// ResponseCode is the status of the stored response; nil when the
	// request never finished (it is then in abandoned_requests).
	ResponseCode *int
	// ResourceID is what the request created (see Outcome.Creates), if
	// it got that far.
	ResourceID *int64
}

func (e *ExpiredError) Error() string {
	return fmt.Sprintf("key %d, first used %s, reaped %s: %s",
		e.KeyID, e.CreatedAt.UTC().Format(time.RFC3339), e.ReapedAt.UTC().Format(time.RFC3339), ErrKeyExpired)
}

func (e *ExpiredError) Unwrap() error { return ErrKeyExpired }

// ReapedKey is an idempotency key that Reap deleted.
type ReapedKey struct {
	ID            int64         `db:"id"`
	UserID        int64         `db:"user_id"`
	RecoveryPoint RecoveryPoint `db:"recovery_point"`
	RequestPath   string        `db:"request_path"`
	ResourceID    *int64        `db:"resource_id"` // what its request created (Outcome.Creates)
	// Reason is set when the key had not finished: its request was
	// copied to abandoned_requests with this reason.
	Reason *string `db:"reason"`
}

// Abandoned reports whether the key had not finished and was copied to
// abandoned_requests for a human.
func (k ReapedKey) Abandoned() bool { return k.Reason != nil }

// ReapFunc queues, on the transaction of a reap batch, what an endpoint
// does about the keys the batch deletes: say, marking what a request
// that never finished left behind as waiting for a person. Its writes
// commit with the batch, or the batch does not commit at all.
type ReapFunc func(ctx context.Context, tx *Tx, reaped []ReapedKey) error

// errReapedPredecessor is the fence's finding that a key at started has a
// record in reaped_keys: see phaseOnce and retire.
var errReapedPredecessor = errors.New("idempotency key has a reaped predecessor")

// retire ends a request whose key turned out, at its first phase, to have
// a reaped predecessor: the key was claimed in the instant the reaper
// deleted the earlier one. Nothing has run under it, so it is deleted,
// and the request is refused as the claim would have refused it.
func (s *Store) retire(ctx context.Context, key *Key) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `
		DELETE FROM idempotency_keys
		WHERE id = $1 AND lock_token = $2 AND recovery_point = 'started'`,
		key.ID, key.lockToken()); err != nil {
		return fmt.Errorf("retire key %d claimed as its predecessor was reaped: %w", key.ID, err)
	}
	key.LockedAt, key.LockToken = nil, nil
	outcome, err := s.reaped(ctx, s.pool, Request{
		UserID: key.UserID, Key: key.IdempotencyKey,
		Method: key.RequestMethod, Path: key.RequestPath, Params: key.RequestParams,
	})
	if errors.Is(err, ErrKeyExpired) || errors.Is(err, ErrKeyReused) {
		s.metrics.Outcome(outcome)
	}
	return err
}

// reaped arbitrates a claim of a key that has no row: the reaper's record
// of it refuses the request, as expired if it is the request the key was
// used for and as a reused key otherwise. With no record either, the key
// was deleted between the claim's insert and its lock; the client
// retries.
func (s *Store) reaped(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, req Request) (metrics.Outcome, error) {
	var (
		expired ExpiredError
		matches bool
	)
	err := q.QueryRow(ctx, `
		SELECT idempotency_key_id, created_at, reaped_at, response_code, resource_id,
		       request_method = $3 AND request_path = $4
		       AND request_params_sha256 = sha256(convert_to($5::jsonb::text, 'UTF8'))
		FROM reaped_keys
		WHERE user_id = $1 AND idempotency_key = $2`,
		req.UserID, req.Key, req.Method, req.Path, req.Params,
	).Scan(&expired.KeyID, &expired.CreatedAt, &expired.ReapedAt, &expired.ResponseCode, &expired.ResourceID, &matches)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, fmt.Errorf("key vanished while claiming: %w", ErrContention)
	case err != nil:
		return 0, fmt.Errorf("look up reaped idempotency key: %w", err)
	case !matches:
		return metrics.OutcomeReuseMismatch, fmt.Errorf("reaped key %d: %w", expired.KeyID, ErrKeyReused)
	}
	logctx.Set(ctx, slog.Int64(logctx.IdempotencyKeyID, expired.KeyID))
	return metrics.OutcomeExpired, &expired
}

// Creates records on the key, with the phase, the id of what the phase
// creates: the endpoint's resource, such as a ride. A client that comes
// back after the key was reaped is told where to look (ExpiredError). The
// phase's move, which it must say first (Tx.Move), draws the id from
// sequence (the resource table's id sequence, say rides_id_seq); the
// phase's insert, after it, takes it as the resource's id with currval,
// the session's. Neither waits for the other's answer, so on the fast
// path the phase still goes to Postgres in one round trip.
func (o Outcome) Creates(sequence string) Outcome {
	o.createdFrom = &sequence
	return o
}

// ForgetReaped deletes up to limit records of reaped keys first used more
// than retention ago, the reaper's other batch: past it, the key's value
// may be used for a new request. It returns how many it deleted; fewer
// than limit means no more are due, or that the rest are locked by
// another reaper.
func (s *Store) ForgetReaped(ctx context.Context, retention time.Duration, limit int) (int, error) {
	tag, err := s.pool.Exec(ctx, `
		DELETE FROM reaped_keys
		WHERE (user_id, idempotency_key) IN (
			SELECT user_id, idempotency_key
			FROM reaped_keys
			WHERE created_at < now() - $1::interval
			ORDER BY created_at
			LIMIT $2
			FOR UPDATE SKIP LOCKED
		)`, retention, limit)
	if err != nil {
		return 0, fmt.Errorf("forget reaped idempotency keys older than %s: %w", retention, err)
	}
	return int(tag.RowsAffected()), nil
}
