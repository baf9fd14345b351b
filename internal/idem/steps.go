package idem

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rocketrides/rocketrides/internal/platform/metrics"
)

// A request's story is the steps its key took: every claim, every atomic
// phase, every unknown outcome, set-aside and unlock, each with the time,
// the process (Config.Actor) and the attempt (Key.Claims) it belongs to.
// Each step is appended to the key's own row (idempotency_keys.steps) by
// the statement that takes it, so recording it costs the request no round
// trip, and no row or index entry of its own. The steps go with their key
// when the reaper deletes it.

// StepEvent is what happened to a key in a step.
type StepEvent string

// The events of a key's steps.
const (
	// StepClaimed: a new key, claimed by its first request.
	StepClaimed StepEvent = "claimed"
	// StepResumed: a released key claimed again (a retry, the completer,
	// a person).
	StepResumed StepEvent = "resumed"
	// StepTookOver: a stale lock taken over; whoever held it is fenced
	// off.
	StepTookOver StepEvent = "took_over"
	// StepReached: an atomic phase committed and reached the step's
	// recovery point.
	StepReached StepEvent = "reached"
	// StepUnknownOutcome: the foreign call ended with an outcome nobody
	// can know (see RecordUnknownOutcome).
	StepUnknownOutcome StepEvent = "unknown_outcome"
	// StepSetAside: set aside for a person; Detail says why.
	StepSetAside StepEvent = "set_aside"
	// StepUnlocked: released after a failure, for a retry to resume.
	StepUnlocked StepEvent = "unlocked"
	// StepReopened: a person cleared the set-aside so that another
	// attempt may run (see Reopen).
	StepReopened StepEvent = "reopened"
)

// Step is one of a key's steps.
type Step struct {
	At            time.Time     `db:"at"`
	Event         StepEvent     `db:"event"`
	RecoveryPoint RecoveryPoint `db:"recovery_point"`
	Actor         string        `db:"actor"`
	Attempt       int           `db:"attempt"`
	Detail        *string       `db:"detail"`
}

// step is the expression that appends a step to a key's steps, for the
// SET of the statement that takes it: event, point (the recovery point
// after the step), actor and attempt are SQL expressions, parameters or
// the row's own columns. Inside an UPDATE's SET every column is the row's
// value before the update.
func step(event, point, actor, attempt string) string {
	return keptSteps + ` || ` + stepObject(event, point, actor, attempt)
}

// MaxSteps bounds the steps a key keeps. A key the completer retries every
// minute through a long Stripe outage takes two steps a minute until it is
// reaped; each step rewrites the key's row, steps and all, so without a
// bound every attempt would write more than the one before.
const MaxSteps = 100

// keptSteps is a key's steps as the next step is appended to them: all of
// them, or past MaxSteps, the first (how the request began) and the
// latest, leaving room for the next.
var keptSteps = fmt.Sprintf(`(CASE WHEN jsonb_array_length(steps) < %d THEN steps
	ELSE jsonb_build_array(steps -> 0) || jsonb_path_query_array(steps, '$[last - %d to last]') END)`,
	MaxSteps, MaxSteps-3)

// stepObject is one step, as a key's steps hold it.
func stepObject(event, point, actor, attempt string) string {
	return `jsonb_build_object('at', clock_timestamp(), 'event', ` + event + `::text,
		'recovery_point', ` + point + `::text, 'actor', ` + actor + `::text, 'attempt', ` + attempt + `)`
}

var actorPattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,29}$`)

// takeSQL locks a key for a new claim and records the step ($3, the
// event; $4, the actor) in the same statement.
var takeSQL = `
	UPDATE idempotency_keys
	SET locked_at = now(), last_run_at = now(), lock_token = $2, claims = claims + 1,
	    steps = ` + step("$3", "recovery_point", "$4", "claims + 1") + `
	WHERE id = $1
	RETURNING ` + keyColumns

// keyColumnsOf is keyColumns qualified by table alias a.
func keyColumnsOf(a string) string {
	cols := strings.Split(keyColumns, ",")
	for i, c := range cols {
		cols[i] = a + "." + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

// Steps returns the steps key keyID took, oldest first.
func (s *Store) Steps(ctx context.Context, keyID int64) ([]Step, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT (s.step->>'at')::timestamptz AS at,
		       s.step->>'event' AS event,
		       s.step->>'recovery_point' AS recovery_point,
		       s.step->>'actor' AS actor,
		       (s.step->>'attempt')::int AS attempt,
		       s.step->>'detail' AS detail
		FROM idempotency_keys k
		CROSS JOIN LATERAL jsonb_array_elements(k.steps) WITH ORDINALITY AS s(step, n)
		WHERE k.id = $1
		ORDER BY s.n`, keyID)
	if err != nil {
		return nil, fmt.Errorf("read steps of key %d: %w", keyID, err)
	}
	steps, err := pgx.CollectRows(rows, pgx.RowToStructByName[Step])
	if err != nil {
		return nil, fmt.Errorf("read steps of key %d: %w", keyID, err)
	}
	return steps, nil
}

// ErrKeyNotFound means no key has the id asked for: it never existed or
// the reaper deleted it.
var ErrKeyNotFound = errors.New("idempotency key not found")

// ErrKeyFinished means the key has its response stored: there is nothing
// left to settle.
var ErrKeyFinished = errors.New("idempotency key is finished")

// ClaimByID claims key id for a person who settles it by hand (the
// console), with the same rules as a request's claim: a key someone else
// holds under a live lock is refused (ErrInFlight), a stale lock is taken
// over and its holder fenced off, and a finished key is refused
// (ErrKeyFinished). check, if not nil, sees the key first, locked: an
// error from it refuses the claim, and nothing is written. The key comes
// back locked with a fresh token, for Phase, or for Reopen; the caller
// unlocks it on failure.
func (s *Store) ClaimByID(ctx context.Context, id int64, check func(*Key) error) (*Key, error) {
	var (
		key     *Key
		outcome *metrics.Outcome
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		l, err := s.lockKey(ctx, tx, `id = $2`, `true`, id)
		switch {
		case errors.Is(err, errNoKey):
			return fmt.Errorf("key %d: %w", id, ErrKeyNotFound)
		case err != nil:
			return err
		case l.RecoveryPoint == Finished:
			return fmt.Errorf("key %d: %w", id, ErrKeyFinished)
		case l.LockFresh:
			outcome = new(metrics.OutcomeInFlightConflict)
			return fmt.Errorf("key %d: %w", id, ErrInFlight)
		}
		if check != nil {
			if err := check(&l.Key); err != nil {
				return err
			}
		}
		var taken metrics.Outcome
		if key, taken, err = s.take(ctx, tx, &l.Key); err == nil {
			outcome = &taken
		}
		return err
	})
	if outcome != nil {
		s.metrics.Outcome(*outcome)
	}
	if err != nil {
		return nil, err
	}
	annotate(ctx, key)
	return key, nil
}

// Reopen ends a person's settlement of a key set aside without settling
// its outcome: in one fenced atomic phase, fn's writes, the flag cleared,
// the count of unknown outcomes started afresh and the lock released, so
// that a retry or the completer runs the request again from its recovery
// point. fn may be nil.
func (s *Store) Reopen(ctx context.Context, key *Key, fn func(ctx context.Context, tx *Tx) error) error {
	return s.Phase(ctx, key, func(ctx context.Context, tx *Tx) (Outcome, error) {
		if fn != nil {
			if err := fn(ctx, tx); err != nil {
				return Outcome{}, err
			}
		}
		return Outcome{reopen: true}, nil
	})
}

// queueReopen ends a phase that reopens key (see Reopen).
func (s *Store) queueReopen(ctx context.Context, tx *Tx, key *Key, from RecoveryPoint) *queuedPhase {
	tx.QueueOne(fmt.Sprintf("reopen key %d at %s", key.ID, from), `
		UPDATE idempotency_keys
		SET attention_reason = NULL, unknown_outcomes = 0, locked_at = NULL, lock_token = NULL,
		    steps = `+step("'reopened'", "recovery_point", "$4", "claims")+`
		WHERE id = $1 AND lock_token = $2 AND recovery_point = $3`,
		key.ID, key.lockToken(), from, s.actor)
	return &queuedPhase{next: from, settle: func() {
		key.AttentionReason, key.UnknownOutcomes = nil, 0
		key.LockedAt, key.LockToken = nil, nil
		annotate(ctx, key)
	}}
}

// KeyByID returns key id; ErrKeyNotFound if there is none.
func (s *Store) KeyByID(ctx context.Context, id int64) (*Key, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+keyColumns+` FROM idempotency_keys WHERE id = $1`, id)
	if err != nil {
		return nil, fmt.Errorf("read idempotency key %d: %w", id, err)
	}
	key, err := collectKey(rows)
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
	return s.keys(ctx, `WHERE idempotency_key = $1 ORDER BY id DESC LIMIT $2`, clientKey, limit)
}

// KeysOfUser returns up to limit of user userID's keys, newest first.
func (s *Store) KeysOfUser(ctx context.Context, userID int64, limit int) ([]*Key, error) {
	return s.keys(ctx, `WHERE user_id = $1 ORDER BY id DESC LIMIT $2`, userID, limit)
}

// SetAsideKeys returns up to limit keys set aside for a person and not
// finished, those waiting longest first.
func (s *Store) SetAsideKeys(ctx context.Context, limit int) ([]*Key, error) {
	return s.keys(ctx, `WHERE attention_reason IS NOT NULL AND response_code IS NULL
		ORDER BY last_run_at LIMIT $1`, limit)
}

func (s *Store) keys(ctx context.Context, where string, args ...any) ([]*Key, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+keyColumns+` FROM idempotency_keys `+where, args...)
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
