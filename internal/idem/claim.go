package idem

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/rocketrides/rocketrides/internal/platform/metrics"
)

const keyColumns = `id, created_at, idempotency_key, last_run_at, locked_at, lock_token,
	request_method, request_params, request_path, origin_ip,
	response_code, response_body, recovery_point, user_id,
	first_foreign_attempt_at, unknown_outcomes, attention_reason, claims, identity`

// Claim is the first atomic phase of an idempotent request. It returns the
// key locked for this request, or, if the key is already finished, the
// key unlocked with its stored response (the caller replays it; replayed
// is true). The checks run in the order a client needs them: a different
// request under the same key is refused first (ErrKeyReused), then a
// finished key replays, then a live lock refuses (ErrInFlight), and only
// then is a stale or released lock taken over. A key the reaper has
// deleted, and still keeps a record of, is refused: an *ExpiredError for
// the request it was used for, ErrKeyReused for another.
func (s *Store) Claim(ctx context.Context, req Request) (key *Key, replayed bool, err error) {
	// Fast path, one round trip for the two common cases. A key never
	// seen before is inserted already locked; the unique index arbitrates
	// between concurrent requests with the same new key, so exactly one
	// insert wins. A key that already finished, for the same request, is
	// read back in the same statement and replayed: finished is final, so
	// no lock is needed to trust it. Anything else (a different request,
	// a key in flight or abandoned, a key inserted concurrently that this
	// statement's snapshot cannot see) falls through to the locking path.
	//
	// The insert is not even tried for a key the statement can see: a
	// replay then costs an index probe, not an id drawn from the sequence
	// and a row built only to be dropped on the conflict. Nor for a key
	// the reaper deleted, which has no row left to conflict with: a key of
	// which reaped_keys keeps a record is not inserted, and the claim
	// falls through to the locking path, which finds the record. Both
	// guards are index probes inside the same statement, so a new key
	// still costs one round trip.
	rows, err := s.pool.Query(ctx, `
		WITH inserted AS (
			INSERT INTO idempotency_keys
				(user_id, idempotency_key, request_method, request_path, request_params,
				 origin_ip, recovery_point, locked_at, lock_token, steps)
			SELECT $1::bigint, $2::text, $3::text, $4::text, $5::jsonb, $6::inet, 'started', now(), $7::uuid,
			       jsonb_build_array(`+stepObject("'claimed'", "'started'", "$8", "1")+`)
			WHERE NOT EXISTS (
				SELECT 1 FROM idempotency_keys WHERE user_id = $1::bigint AND idempotency_key = $2::text)
			  AND NOT EXISTS (
				SELECT 1 FROM reaped_keys WHERE user_id = $1::bigint AND idempotency_key = $2::text)
			ON CONFLICT (user_id, idempotency_key) DO NOTHING
			RETURNING `+keyColumns+`
		)
		SELECT `+keyColumns+`, true AS inserted FROM inserted
		UNION ALL
		SELECT `+keyColumns+`, false FROM idempotency_keys
		WHERE user_id = $1 AND idempotency_key = $2
		  AND recovery_point = 'finished'
		  AND request_method = $3 AND request_path = $4 AND request_params = $5::jsonb`,
		req.UserID, req.Key, req.Method, req.Path, req.Params, req.OriginIP, newLockToken(), s.actor)
	if err != nil {
		return nil, false, fmt.Errorf("claim idempotency key: %w", err)
	}
	claimed, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByName[claimRow])
	if err != nil {
		return nil, false, fmt.Errorf("claim idempotency key: %w", err)
	}
	if len(claimed) == 1 {
		key = &claimed[0].Key
		annotate(ctx, key)
		if claimed[0].Inserted {
			s.metrics.Outcome(metrics.OutcomeNew)
			return key, false, nil
		}
		s.metrics.Outcome(metrics.OutcomeReplay)
		return key, true, nil
	}
	return s.claimExisting(ctx, req)
}

// claimRow is a row of the fast claim: the key, and whether this request
// inserted it.
type claimRow struct {
	Key
	Inserted bool `db:"inserted"`
}

// claimExisting arbitrates a key that already exists.
func (s *Store) claimExisting(ctx context.Context, req Request) (*Key, bool, error) {
	var (
		key      *Key
		replayed bool
		outcome  metrics.Outcome
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// FOR UPDATE serialises concurrent claims of the same key: the
		// decision below is made while no one else can change the row.
		l, err := s.lockKey(ctx, tx, `user_id = $2 AND idempotency_key = $3`,
			`request_method = $4 AND request_path = $5 AND request_params = $6::jsonb`,
			req.UserID, req.Key, req.Method, req.Path, req.Params)
		switch {
		case errors.Is(err, errNoKey):
			// No key: the reaper deleted it, before the claim's insert or
			// (vanishingly rarely) since.
			var expired error
			outcome, expired = s.reaped(ctx, tx, req)
			return expired
		case err != nil:
			return err
		}
		annotate(ctx, &l.Key)
		switch {
		case !l.Matches:
			outcome = metrics.OutcomeReuseMismatch
			return fmt.Errorf("key %d: %w", l.ID, ErrKeyReused)
		case l.RecoveryPoint == Finished:
			key, replayed, outcome = &l.Key, true, metrics.OutcomeReplay
			return nil
		case l.LockFresh:
			outcome = metrics.OutcomeInFlightConflict
			return fmt.Errorf("key %d: %w", l.ID, ErrInFlight)
		}
		key, outcome, err = s.take(ctx, tx, &l.Key)
		return err
	})
	if err == nil || errors.Is(err, ErrKeyReused) || errors.Is(err, ErrInFlight) || errors.Is(err, ErrKeyExpired) {
		s.metrics.Outcome(outcome)
	}
	if err != nil {
		return nil, false, err
	}
	return key, replayed, nil
}

// lockedKey is a key read FOR UPDATE by lockKey: the row, whether it was
// claimed for the request at hand, and whether its lock is still live.
type lockedKey struct {
	Key
	Matches   bool `db:"matches"`
	LockFresh bool `db:"lock_fresh"`
}

// errNoKey is lockKey's finding that no key matches.
var errNoKey = errors.New("no such idempotency key")

// lockKey reads, in tx and FOR UPDATE, the key where finds, with matches
// computed by the condition given; args are theirs, from $2 on ($1 is the
// lock timeout). FOR UPDATE serialises claims of the same key: what the
// caller decides from the row no one else can change until tx ends.
func (s *Store) lockKey(ctx context.Context, tx pgx.Tx, where, matches string, args ...any) (*lockedKey, error) {
	rows, err := tx.Query(ctx, `
		SELECT `+keyColumns+`, `+matches+` AS matches,
		       coalesce(locked_at > now() - $1::interval, false) AS lock_fresh
		FROM idempotency_keys
		WHERE `+where+`
		FOR UPDATE`, append([]any{s.lockTimeout}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("lock idempotency key: %w", err)
	}
	locked, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByName[lockedKey])
	switch {
	case err != nil:
		return nil, fmt.Errorf("lock idempotency key: %w", err)
	case len(locked) == 0:
		return nil, errNoKey
	}
	return locked[0], nil
}

// take claims k, locked by lockKey and found free to take (released, or
// its lock stale), for a new attempt: a fresh lock token, one more claim,
// and the step that says which. A lock still on k is stale (the caller
// has checked), and taking it fences its holder off. It returns the key
// as taken and the claim's outcome.
func (s *Store) take(ctx context.Context, tx pgx.Tx, k *Key) (*Key, metrics.Outcome, error) {
	event, outcome := StepResumed, metrics.OutcomeResumed
	if k.LockedAt != nil {
		event, outcome = StepTookOver, metrics.OutcomeLockTakeover
	}
	rows, err := tx.Query(ctx, takeSQL, k.ID, newLockToken(), event, s.actor)
	if err != nil {
		return nil, outcome, fmt.Errorf("take idempotency key %d: %w", k.ID, err)
	}
	key, err := collectKey(rows)
	if err != nil {
		return nil, outcome, fmt.Errorf("take idempotency key %d: %w", k.ID, err)
	}
	return key, outcome, nil
}

// takeSQL locks a key for a new claim and records the step ($3, the
// event; $4, the actor) in the same statement.
var takeSQL = `
	UPDATE idempotency_keys
	SET locked_at = now(), last_run_at = now(), lock_token = $2, claims = claims + 1,
	    steps = ` + step("$3", "recovery_point", "$4", "claims + 1") + `
	WHERE id = $1
	RETURNING ` + keyColumns
