// Second reading: what the console reads, keys and their counts and the
// abandoned requests; nothing a request runs calls it.

package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrKeyNotFound means no key has the id asked for: it never existed or
// the reaper deleted it.
var ErrKeyNotFound = errors.New("idempotency key not found")

// KeyByID returns key id; ErrKeyNotFound if there is none.
func (s *Store) KeyByID(ctx context.Context, id int64) (*Key, error) {
	key, err := collectKey(s.pool.Query(ctx, `
		SELECT id, created_at, idempotency_key, last_run_at, locked_at, lock_token,
		       request_method, request_params, request_path, origin_ip,
		       response_code, response_body, recovery_point, user_id,
		       first_foreign_attempt_at, unknown_outcomes, attention_reason, claims, identity
		FROM idempotency_keys
		WHERE id = $1`, id))
	if err != nil {
		return nil, fmt.Errorf("read idempotency key %d: %w", id, err)
	}
	if key == nil {
		return nil, fmt.Errorf("key %d: %w", id, ErrKeyNotFound)
	}
	return key, nil
}

// FindKeys returns the keys, of any user, whose client key is clientKey,
// newest first: a person looks a request up by the Idempotency-Key a
// customer quotes.
func (s *Store) FindKeys(ctx context.Context, clientKey string, limit int) ([]*Key, error) {
	return s.keys(ctx, `
		SELECT id, created_at, idempotency_key, last_run_at, locked_at, lock_token,
		       request_method, request_params, request_path, origin_ip,
		       response_code, response_body, recovery_point, user_id,
		       first_foreign_attempt_at, unknown_outcomes, attention_reason, claims, identity
		FROM idempotency_keys
		WHERE idempotency_key = $1
		ORDER BY id DESC LIMIT $2`, clientKey, limit)
}

// KeysOfUser returns up to limit of user userID's keys, newest first.
func (s *Store) KeysOfUser(ctx context.Context, userID int64, limit int) ([]*Key, error) {
	return s.keys(ctx, `
		SELECT id, created_at, idempotency_key, last_run_at, locked_at, lock_token,
		       request_method, request_params, request_path, origin_ip,
		       response_code, response_body, recovery_point, user_id,
		       first_foreign_attempt_at, unknown_outcomes, attention_reason, claims, identity
		FROM idempotency_keys
		WHERE user_id = $1
		ORDER BY id DESC LIMIT $2`, userID, limit)
}

// SetAsideKeys returns up to limit keys set aside for a person and not
// finished, those waiting longest first.
func (s *Store) SetAsideKeys(ctx context.Context, limit int) ([]*Key, error) {
	return s.keys(ctx, `
		SELECT id, created_at, idempotency_key, last_run_at, locked_at, lock_token,
		       request_method, request_params, request_path, origin_ip,
		       response_code, response_body, recovery_point, user_id,
		       first_foreign_attempt_at, unknown_outcomes, attention_reason, claims, identity
		FROM idempotency_keys
		WHERE attention_reason IS NOT NULL AND response_code IS NULL
		ORDER BY last_run_at LIMIT $1`, limit)
}

// keys runs sql, a statement that selects keys.
func (s *Store) keys(ctx context.Context, sql string, args ...any) ([]*Key, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("read idempotency keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByName[Key])
	if err != nil {
		return nil, fmt.Errorf("read idempotency keys: %w", err)
	}
	return keys, nil
}

// Counts are the keys by where they stand, for the console's overview.
type Counts struct {
	// ByRecoveryPoint counts unfinished keys by recovery point.
	ByRecoveryPoint map[RecoveryPoint]int
	// InFlight: unfinished, locked by a live request. Stale: locked, the
	// lock past the timeout (its holder presumed dead). Released:
	// unfinished and unlocked, for a retry or the completer. Finished:
	// the response stored. NeedsAttention: set aside for a person.
	InFlight, Stale, Released, Finished, NeedsAttention int
}

// Count counts the keys by recovery point and lock state. It reads the
// whole table: it is for an operator's screen, not for a request.
func (s *Store) Count(ctx context.Context) (*Counts, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT recovery_point,
		       CASE WHEN recovery_point = 'finished' THEN 'finished'
		            WHEN attention_reason IS NOT NULL THEN 'needs_attention'
		            WHEN locked_at IS NULL THEN 'released'
		            WHEN locked_at > now() - $1::interval THEN 'in_flight'
		            ELSE 'stale' END,
		       count(*)
		FROM idempotency_keys
		GROUP BY 1, 2`, s.lockTimeout)
	if err != nil {
		return nil, fmt.Errorf("count idempotency keys: %w", err)
	}
	c := &Counts{ByRecoveryPoint: map[RecoveryPoint]int{}}
	var (
		point RecoveryPoint
		state string
		n     int
	)
	_, err = pgx.ForEachRow(rows, []any{&point, &state, &n}, func() error {
		if point != Finished {
			c.ByRecoveryPoint[point] += n
		}
		switch state {
		case "finished":
			c.Finished += n
		case "needs_attention":
			c.NeedsAttention += n
		case "released":
			c.Released += n
		case "in_flight":
			c.InFlight += n
		default:
			c.Stale += n
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count idempotency keys: %w", err)
	}
	return c, nil
}

// Abandoned is a row of abandoned_requests.
type Abandoned struct {
	KeyID          int64         `db:"idempotency_key_id"`
	UserID         int64         `db:"user_id"`
	IdempotencyKey string        `db:"idempotency_key"`
	RequestMethod  string        `db:"request_method"`
	RequestPath    string        `db:"request_path"`
	RequestParams  []byte        `db:"request_params"`
	RecoveryPoint  RecoveryPoint `db:"recovery_point"`
	CreatedAt      time.Time     `db:"created_at"`
	LastRunAt      time.Time     `db:"last_run_at"`
	ReapedAt       time.Time     `db:"reaped_at"`
	Reason         string        `db:"reason"`
}

// AbandonedRequests returns up to limit of the requests the reaper listed
// for a person, most recently reaped first.
func (s *Store) AbandonedRequests(ctx context.Context, limit int) ([]Abandoned, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT idempotency_key_id, user_id, idempotency_key, request_method, request_path, request_params,
		       recovery_point, created_at, last_run_at, reaped_at, reason
		FROM abandoned_requests
		ORDER BY reaped_at DESC, idempotency_key_id DESC
		LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("read abandoned requests: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[Abandoned])
	if err != nil {
		return nil, fmt.Errorf("read abandoned requests: %w", err)
	}
	return out, nil
}
