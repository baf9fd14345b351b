// Package idem is the idempotency-key store. It owns idempotency_keys and
// implements the mechanics every idempotent endpoint shares:
//
//   - Claim: the first atomic phase. It records a new key, or arbitrates an
//     existing one: refuse a reused key whose request differs, replay a
//     finished key's stored response, refuse a key another request is
//     working (409), or take over a key whose lock went stale.
//   - Phase: one atomic phase. It runs an endpoint's writes and moves the
//     key to its next recovery point (or finishes it with a response) in a
//     single transaction.
//   - Unlock: release the key after a failure, so that a retry can resume
//     from the last recovery point.
//
// The endpoint supplies the phases between Started and Finished and their
// recovery points; see package rides for the ride DAG.
//
// Every claim takes a fresh lock token, and every phase commits only if the
// key still carries the token it claimed. A request that stalled long
// enough for its lock to be taken over is thereby fenced off: it can no
// longer advance the recovery point or store a response.
//
// The store reports what it sees: each claim's outcome and each phase's
// duration to Config.Metrics, and the key's id and current recovery point
// to the log attributes of the request's context (package logctx), so
// every line a request logs names the key it is working.
package idem

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/platform/logctx"
	"github.com/rocketrides/rocketrides/internal/platform/metrics"
)

// RecoveryPoint names the last atomic phase a request completed. Endpoints
// declare their own points between Started and Finished.
type RecoveryPoint string

const (
	// Started is the recovery point of a freshly claimed key.
	Started RecoveryPoint = "started"
	// Finished means the response is stored; retries replay it.
	Finished RecoveryPoint = "finished"
)

var (
	// ErrKeyReused means the key was first used for a different request
	// (method, path or parameters). Retrying cannot help: it is a client
	// bug.
	ErrKeyReused = errors.New("idempotency key reused with a different request")

	// ErrInFlight means another request holds the key's lock.
	ErrInFlight = errors.New("idempotency key is in use by another request")

	// ErrLockLost means the key's lock was taken over (it went stale) or
	// the key was deleted while this request worked it. The phase was
	// rolled back; whoever holds the key now finishes it.
	ErrLockLost = errors.New("idempotency key lock lost")

	// ErrNeedsAttention means the key was set aside for a human: its
	// outcome could not be settled automatically.
	ErrNeedsAttention = errors.New("idempotency key needs human attention")

	// ErrContention means Postgres kept aborting a phase because of
	// concurrent transactions.
	ErrContention = errors.New("database contention")

	// ErrKeyExpired means the key's request was made under this key
	// before, and the key has since outlived its lifetime and been
	// reaped: the request is never run again (see ExpiredError).
	ErrKeyExpired = errors.New("idempotency key expired")
)

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
	// ResourceID is what the request created (see Outcome.CreatedLast), if
	// it got that far.
	ResourceID *int64
}

func (e *ExpiredError) Error() string {
	return fmt.Sprintf("key %d, first used %s, reaped %s: %s",
		e.KeyID, e.CreatedAt.UTC().Format(time.RFC3339), e.ReapedAt.UTC().Format(time.RFC3339), ErrKeyExpired)
}

func (e *ExpiredError) Unwrap() error { return ErrKeyExpired }

// Store defaults.
const (
	// DefaultLockTimeout is how long a lock protects a key: past it the
	// request holding it is presumed dead and a retry may take over.
	DefaultLockTimeout = 90 * time.Second

	// DefaultPhaseAttempts is how often an atomic phase is tried when
	// Postgres aborts it for a serialization failure or deadlock.
	DefaultPhaseAttempts = 3

	// DefaultActor names the process in the steps it records.
	DefaultActor = "api"
)

// Key is a row of idempotency_keys.
type Key struct {
	ID             int64         `db:"id"`
	CreatedAt      time.Time     `db:"created_at"`
	IdempotencyKey string        `db:"idempotency_key"`
	LastRunAt      time.Time     `db:"last_run_at"`
	LockedAt       *time.Time    `db:"locked_at"`
	LockToken      *uuid.UUID    `db:"lock_token"`
	RequestMethod  string        `db:"request_method"`
	RequestParams  []byte        `db:"request_params"`
	RequestPath    string        `db:"request_path"`
	OriginIP       netip.Addr    `db:"origin_ip"`
	ResponseCode   *int          `db:"response_code"`
	ResponseBody   []byte        `db:"response_body"`
	RecoveryPoint  RecoveryPoint `db:"recovery_point"`
	UserID         int64         `db:"user_id"`

	// Identity is the key's random identity, which no other key ever
	// gets, even when a failover loses the tail of the database and the
	// id sequence hands an id out again: what a foreign idempotency key
	// (rides.StripeKey) is derived from, with the id. Nil for keys
	// created before it existed (migration 000006), which keep deriving
	// theirs from the id alone.
	Identity *uuid.UUID `db:"identity"`

	// FirstForeignAttemptAt is when the request first set out to make
	// its foreign state mutation (see AdvanceToForeignCall), and
	// UnknownOutcomes how many attempts since ended in an error that may
	// have executed (see RecordUnknownOutcome).
	FirstForeignAttemptAt *time.Time `db:"first_foreign_attempt_at"`
	UnknownOutcomes       int        `db:"unknown_outcomes"`
	// AttentionReason is set when the key was set aside for a human
	// (see SetAside); no request or completer works it again.
	AttentionReason *string `db:"attention_reason"`
	// Claims counts the claims of the key: its first request's, each
	// retry's that took it up again, the completer's, a person's. Each
	// step (see Step) names the claim it belongs to as its attempt.
	Claims int `db:"claims"`
}

// Response is a finished key's stored response.
type Response struct {
	Code int
	Body []byte
}

// Response returns the stored response of a finished key.
func (k *Key) Response() Response {
	if k.ResponseCode == nil {
		return Response{}
	}
	return Response{Code: *k.ResponseCode, Body: k.ResponseBody}
}

// Request is what a client asked for under an idempotency key.
type Request struct {
	UserID int64
	Key    string
	Method string
	Path   string
	// Params is the request's parameters as canonical JSON. Keys compare
	// as JSONB, so key order and number spelling do not matter; the
	// record of a reaped key keeps only a hash of the JSONB text, in which
	// key order and spacing do not matter but number spelling does (1 is
	// not 1.0): send each number in one spelling, as Go's encoding/json
	// writes a float64.
	Params   []byte
	OriginIP netip.Addr
}

// Config configures a Store. Pool is required; every other field has a
// default.
type Config struct {
	// Pool is the database holding idempotency_keys. Required.
	Pool *pgxpool.Pool
	// LockTimeout is how long a lock protects a key. Defaults to
	// DefaultLockTimeout.
	LockTimeout time.Duration
	// PhaseAttempts bounds how often a phase is tried when Postgres
	// aborts it for a serialization failure or deadlock. Defaults to
	// DefaultPhaseAttempts.
	PhaseAttempts int
	// Metrics records claim outcomes and phase durations; nil records
	// nothing.
	Metrics *metrics.Idempotency
	// Actor names the process in every step it records on a key (see
	// Step): "api", "completer", "console". Lowercase letters, digits,
	// '-' and '_', at most 30. Defaults to DefaultActor.
	Actor string
}

func (c *Config) validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("idem: Config.Pool is required")
	case c.LockTimeout < 0:
		return fmt.Errorf("idem: Config.LockTimeout must not be negative, got %s", c.LockTimeout)
	case c.PhaseAttempts < 0:
		return fmt.Errorf("idem: Config.PhaseAttempts must not be negative, got %d", c.PhaseAttempts)
	case c.Actor != "" && !actorPattern.MatchString(c.Actor):
		return fmt.Errorf("idem: Config.Actor must be lowercase letters, digits, '-' or '_' (at most 30), got %q", c.Actor)
	}
	return nil
}

// Store reads and writes idempotency keys.
type Store struct {
	pool          *pgxpool.Pool
	lockTimeout   time.Duration
	phaseAttempts int
	metrics       *metrics.Idempotency
	actor         string
}

// New returns a Store for config.
func New(config *Config) (*Store, error) {
	if config == nil {
		return nil, errors.New("idem: Config is required (Pool)")
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	return &Store{
		pool:          config.Pool,
		lockTimeout:   cmp.Or(config.LockTimeout, DefaultLockTimeout),
		phaseAttempts: cmp.Or(config.PhaseAttempts, DefaultPhaseAttempts),
		metrics:       config.Metrics,
		actor:         cmp.Or(config.Actor, DefaultActor),
	}, nil
}

// LockTimeout is the age at which a lock counts as stale.
func (s *Store) LockTimeout() time.Duration { return s.lockTimeout }

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

// errReapedPredecessor is the fence's finding that a key at started has a
// record in reaped_keys: see phaseOnce and retire.
var errReapedPredecessor = errors.New("idempotency key has a reaped predecessor")

// The SQLSTATEs idempotency_key_fence raises (migration 000007).
const (
	fenceLockLost          = "RR001" // ErrLockLost
	fenceReapedPredecessor = "RR002" // errReapedPredecessor
	phaseCheckFailed       = "RR003" // a check of Tx.QueueOne
)

// fenceError is err, a phase's failure, as the fence's finding when the
// fence is what failed: the fence raises, so its error comes back first
// and every statement after it, COMMIT included, was skipped.
func (s *Store) fenceError(key *Key, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case fenceLockLost:
		s.metrics.Outcome(metrics.OutcomeLockLost)
		return fmt.Errorf("fence key %d at %s: %w", key.ID, key.RecoveryPoint, ErrLockLost)
	case fenceReapedPredecessor:
		return fmt.Errorf("fence key %d at %s: %w", key.ID, key.RecoveryPoint, errReapedPredecessor)
	case phaseCheckFailed:
		return fmt.Errorf("phase at %s for key %d: %s", key.RecoveryPoint, key.ID, pgErr.Message)
	}
	return err
}

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

// Outcome is what an atomic phase decides: move to the next recovery
// point, finish the request with a response, or set it aside for a human.
type Outcome struct {
	next        RecoveryPoint
	response    Response
	foreignCall bool
	// attention, when set, is why the key is set aside (see SetAside).
	attention string
	// createdFrom, when set, is the sequence the id of what the request
	// created came from (see CreatedLast).
	createdFrom *string
	// reopen clears a set-aside and releases the key (see Reopen).
	reopen bool
}

// CreatedLast records on the key, with the phase, the id of what the
// request created: the endpoint's resource, such as a ride, which the
// phase itself inserted. A client that comes back after the key was
// reaped is told where to look (ExpiredError). The id is the value the
// phase drew last from sequence (the resource table's id sequence, say
// rides_id_seq): currval is the session's, so the phase must insert the
// resource before it ends, or the key would name what another phase on
// the same pooled connection inserted. The phase need not wait for the
// insert's answer to name what it created, so it still goes to Postgres
// in one round trip.
func (o Outcome) CreatedLast(sequence string) Outcome {
	o.createdFrom = &sequence
	return o
}

// AdvanceToForeignCall moves the key to recovery point next, from which
// the request makes its foreign state mutation, and records (once) when it
// first set out to. A retry long after that time knows the provider may
// have forgotten the attempt. Recording it in the phase's own statement
// costs the request no extra round trip.
func AdvanceToForeignCall(next RecoveryPoint) Outcome { return Outcome{next: next, foreignCall: true} }

// Advance moves the key to recovery point next.
func Advance(next RecoveryPoint) Outcome { return Outcome{next: next} }

// Respond finishes the key, storing the response that every retry of the
// request will replay. Used for success and for final errors alike (a
// declined card is declined on every retry).
func Respond(code int, body []byte) Outcome {
	return Outcome{next: Finished, response: Response{Code: code, Body: body}}
}

// SetAside sets the key aside for a human, with reason, and releases it.
// The key keeps its recovery point, so once a person has settled the
// outcome (say, found the charge at Stripe and recorded it) clearing
// attention_reason lets a retry or the completer finish it; until then
// neither works it. Decided in a phase, the flag commits together with
// the phase's writes (the endpoint's own record of why its resource
// waits for a person).
func SetAside(reason string) Outcome { return Outcome{attention: reason} }

// PhaseFunc is the body of an atomic phase: the writes it queues on tx
// and where the request goes next.
type PhaseFunc func(ctx context.Context, tx *Tx) (Outcome, error)

// Tx is the transaction of one atomic phase, pipelined. Statements are
// queued and go to Postgres together, in order, when the phase needs an
// answer (Flush) and at commit, so a phase costs as few round trips as its
// data dependencies allow: one for each phase of a ride (BEGIN, the
// fence, the writes, the new recovery point and COMMIT), where a
// statement-at-a-time transaction costs four or five. Each statement's
// result reaches the callback set on its QueuedQuery; the first error
// aborts the phase and rolls it back.
type Tx struct {
	conn  *pgx.Conn
	batch *pgx.Batch
}

// Queue adds a statement to the phase, to be sent with the next Flush or
// with the COMMIT.
func (tx *Tx) Queue(sql string, args ...any) *pgx.QueuedQuery {
	return tx.batch.Queue(sql, args...)
}

// QueueOne queues a data-modifying statement (an INSERT, UPDATE or DELETE
// without RETURNING) that must change exactly one row; otherwise the phase
// fails, saying what. Postgres makes the check and aborts the transaction
// (idempotency_key_phase_check): the statement's answer comes back with
// COMMIT's, too late for a check made on it here to stop the commit.
func (tx *Tx) QueueOne(what, sql string, args ...any) {
	tx.batch.Queue(`WITH changed AS (`+sql+` RETURNING 1)
		SELECT idempotency_key_phase_check(count(*) = 1, $`+strconv.Itoa(len(args)+1)+`) FROM changed`,
		append(args, what)...)
}

// Flush sends the queued statements in one round trip and hands each
// result to its callback. It returns the first error.
func (tx *Tx) Flush(ctx context.Context) error {
	b := tx.batch
	tx.batch = &pgx.Batch{}
	return tx.conn.SendBatch(ctx, b).Close()
}

// Phase runs fn and records its outcome on key in one transaction, so the
// phase's writes and the new recovery point commit together or not at
// all. The transaction opens with the fence: it locks the key's row only
// if the key still carries this request's lock token and is still at the
// recovery point the phase started from; otherwise it rolls back and Phase
// returns ErrLockLost. Serialization failures and deadlocks run the whole
// phase again, a bounded number of times.
func (s *Store) Phase(ctx context.Context, key *Key, fn PhaseFunc) error {
	defer s.metrics.PhaseDone(string(key.RecoveryPoint), time.Now())
	return s.retryPhase(ctx, key, fn, 1, nil)
}

// retryPhase runs fn from attempt on; err is the previous attempt's.
func (s *Store) retryPhase(ctx context.Context, key *Key, fn PhaseFunc, attempt int, err error) error {
	for ; attempt <= s.phaseAttempts; attempt++ {
		err = s.phaseOnce(ctx, key, fn)
		if errors.Is(err, errReapedPredecessor) {
			return s.retire(ctx, key)
		}
		if err == nil || !db.IsRetryable(err) {
			return err
		}
	}
	return fmt.Errorf("phase at %s for key %d gave up after %d attempts: %w: %w",
		key.RecoveryPoint, key.ID, s.phaseAttempts, ErrContention, err)
}

func (s *Store) phaseOnce(ctx context.Context, key *Key, fn PhaseFunc) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("phase at %s for key %d: %w", key.RecoveryPoint, key.ID, err)
	}
	// A connection given back inside a transaction is closed by the pool,
	// which rolls the transaction back; rollback spares the reconnect.
	defer conn.Release()
	defer rollback(ctx, conn.Conn()) // a no-op once committed

	tx := &Tx{conn: conn.Conn(), batch: &pgx.Batch{}}
	q, err := s.queuePhase(ctx, tx, key, key.RecoveryPoint, fn)
	if err != nil {
		return s.fenceError(key, err)
	}
	if err := tx.Flush(ctx); err != nil {
		return s.fenceError(key, fmt.Errorf("phase at %s for key %d: %w", key.RecoveryPoint, key.ID, err))
	}
	q.settle()
	return nil
}

// PhaseThen runs first and then second as two atomic phases of key, each
// in its own transaction with its own COMMIT, both sent to Postgres in one
// pipeline: no foreign state mutation separates them, so the second need
// not wait for the first's answer. Every recovery point is still committed
// on its own. Should the second fail, the first stays committed and the
// key at the recovery point it reached, which is where a retry resumes.
// (A pipeline stops at its first error, so a first that fails sends no
// second.) If first finishes the key, sets it aside or reopens it, second
// does not run.
//
// A phase Postgres aborts for a concurrent transaction is run again as
// Phase runs it, one phase at a time; the pipelined try counts as its
// first attempt.
func (s *Store) PhaseThen(ctx context.Context, key *Key, first, second PhaseFunc) error {
	start, from := time.Now(), key.RecoveryPoint
	q, q2, err := s.phasesOnce(ctx, key, first, second)
	switch {
	case q == nil || !q.committed:
		if errors.Is(err, errReapedPredecessor) {
			return s.retire(ctx, key)
		}
		if !db.IsRetryable(err) {
			return err
		}
		err = s.retryPhase(ctx, key, first, 2, err)
		s.metrics.PhaseDone(string(from), start)
		if err != nil {
			return err
		}
		if key.LockToken == nil || key.AttentionReason != nil {
			return nil // finished, set aside or reopened: nothing follows
		}
		return s.Phase(ctx, key, second)
	case err != nil && db.IsRetryable(err):
		s.metrics.PhaseDone(string(from), start)
		defer s.metrics.PhaseDone(string(key.RecoveryPoint), start)
		return s.retryPhase(ctx, key, second, 2, err)
	case err != nil:
		s.metrics.PhaseDone(string(from), start)
		return err
	}
	s.metrics.PhaseDone(string(from), start)
	if q2 != nil {
		s.metrics.PhaseDone(string(q.next), start)
	}
	return nil
}

// phasesOnce sends first and second in one pipeline (see PhaseThen). It
// returns the phases it queued, nil for one it did not, with the error of
// whichever failed.
func (s *Store) phasesOnce(ctx context.Context, key *Key, first, second PhaseFunc) (q1, q2 *queuedPhase, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("phase at %s for key %d: %w", key.RecoveryPoint, key.ID, err)
	}
	defer conn.Release()
	defer rollback(ctx, conn.Conn()) // a no-op once committed

	tx := &Tx{conn: conn.Conn(), batch: &pgx.Batch{}}
	q1, err = s.queuePhase(ctx, tx, key, key.RecoveryPoint, first)
	if err != nil {
		return nil, nil, s.fenceError(key, err)
	}
	var stopped error // second's own, before it was sent
	if q1.locked {
		// The second's BEGIN follows the first's COMMIT: every transaction
		// in the pipeline is explicit, since a statement sent before a
		// BEGIN in the same implicit block would be folded into the
		// BEGIN's transaction.
		q2, stopped = s.queuePhase(ctx, tx, key, q1.next, second)
	}
	// A second whose own code failed may have queued part of its
	// transaction; it goes out without its COMMIT and is rolled back.
	err = tx.Flush(ctx)
	if !q1.committed {
		return q1, nil, s.fenceError(key, fmt.Errorf("phase at %s for key %d: %w", key.RecoveryPoint, key.ID, cmp.Or(err, stopped)))
	}
	q1.settle()
	switch {
	case stopped != nil:
		return q1, nil, s.fenceError(key, stopped)
	case err != nil:
		return q1, nil, s.fenceError(key, fmt.Errorf("phase at %s for key %d: %w", key.RecoveryPoint, key.ID, err))
	case q2 != nil:
		q2.settle()
	}
	return q1, q2, nil
}

// queuedPhase is an atomic phase queued on a Tx, COMMIT included.
type queuedPhase struct {
	// next is the recovery point the phase moves the key to; locked says
	// whether this request still holds the key after it (an intermediate
	// recovery point, not finished, not set aside or reopened).
	next   RecoveryPoint
	locked bool
	// committed is set when COMMIT has answered COMMIT.
	committed bool
	// settle makes the in-memory key follow; only once committed.
	settle func()
}

// queuePhase queues, on tx, the atomic phase fn of key from recovery point
// from: BEGIN, the fence, fn's statements, the statement that records the
// outcome on the key, and COMMIT. Nothing is sent but what fn flushes.
//
// The fence goes out with the phase's statements, and COMMIT right after
// them: the fence raises when the key no longer carries this request's
// lock token and recovery point (see fenceError), which aborts the
// transaction, so nothing queued after it can commit whatever its answer.
// A phase therefore costs one round trip unless fn needs an answer on the
// way (Flush).
//
// From started, the fence also makes sure the key has no reaped
// predecessor. A claim whose insert ran in the very instant the reaper
// deleted the key's earlier row (the insert waits for the deleted row and
// then proceeds, its guard having read reaped_keys before the reaper
// committed) is caught here, before its request does anything: the fence
// reads after the reaper's commit.
func (s *Store) queuePhase(ctx context.Context, tx *Tx, key *Key, from RecoveryPoint, fn PhaseFunc) (*queuedPhase, error) {
	tx.Queue(`BEGIN`)
	tx.Queue(`SELECT idempotency_key_fence($1, $2, $3)`, key.ID, key.lockToken(), from)
	out, err := fn(ctx, tx)
	if err != nil {
		return nil, err
	}
	var q *queuedPhase
	switch {
	case out.attention != "":
		q = s.queueSetAside(ctx, tx, key, from, out.attention)
	case out.reopen:
		q = s.queueReopen(ctx, tx, key, from)
	default:
		q = s.queueAdvance(ctx, tx, key, from, out)
	}
	tx.Queue(`COMMIT`).Exec(func(tag pgconn.CommandTag) error {
		if tag.String() != "COMMIT" {
			return pgx.ErrTxCommitRollback
		}
		q.committed = true
		return nil
	})
	return q, nil
}

// queueAdvance records out on key: its next recovery point, or its
// response.
func (s *Store) queueAdvance(ctx context.Context, tx *Tx, key *Key, from RecoveryPoint, out Outcome) *queuedPhase {
	var code *int
	var body []byte
	if out.next == Finished {
		code, body = &out.response.Code, out.response.Body
	}
	var (
		stored                []byte
		firstForeignAttemptAt *time.Time
	)
	// Under the fence's row lock this matches; its conditions repeat the
	// fence's so that the statement is correct on its own. Intermediate
	// phases refresh locked_at as a heartbeat; finishing releases the lock.
	//
	// The step goes in the same statement. A phase commits on a key set
	// aside only when a person took the key to settle it (nothing else
	// works such a key), so the phase also clears the flag.
	tx.Queue(`
		UPDATE idempotency_keys
		SET recovery_point = $4,
		    response_code  = $5,
		    response_body  = $6,
		    locked_at      = CASE WHEN $4 = 'finished' THEN NULL ELSE now() END,
		    lock_token     = CASE WHEN $4 = 'finished' THEN NULL ELSE lock_token END,
		    first_foreign_attempt_at = CASE WHEN $7 THEN coalesce(first_foreign_attempt_at, now())
		                                    ELSE first_foreign_attempt_at END,
		    resource_id    = coalesce(currval($9::text::regclass), resource_id),
		    attention_reason = NULL,
		    steps          = `+step("'reached'", "$4", "$8", "claims")+`
		WHERE id = $1 AND lock_token = $2 AND recovery_point = $3
		RETURNING response_body, first_foreign_attempt_at`,
		key.ID, key.lockToken(), from, out.next, code, body, out.foreignCall, s.actor, out.createdFrom,
	).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&stored, &firstForeignAttemptAt); err != nil {
			return fmt.Errorf("advance key %d from %s to %s: %w", key.ID, from, out.next, err)
		}
		return nil
	})
	return &queuedPhase{next: out.next, locked: out.next != Finished, settle: func() {
		// Committed: only now may the in-memory key follow.
		key.RecoveryPoint = out.next
		key.AttentionReason = nil
		key.FirstForeignAttemptAt = firstForeignAttemptAt
		if out.next == Finished {
			code := out.response.Code
			// The stored body is what Postgres gives back (JSONB's own
			// rendering), so this first response and every replay are
			// the same bytes.
			key.ResponseCode, key.ResponseBody = &code, stored
			key.LockedAt, key.LockToken = nil, nil
		}
		annotate(ctx, key)
	}}
}

// queueSetAside ends a phase that sets key aside (see SetAside): the flag,
// under the fence's row lock.
func (s *Store) queueSetAside(ctx context.Context, tx *Tx, key *Key, from RecoveryPoint, reason string) *queuedPhase {
	tx.QueueOne(fmt.Sprintf("set key %d aside at %s", key.ID, from), `
		UPDATE idempotency_keys
		SET attention_reason = $4, locked_at = NULL, lock_token = NULL,
		    steps = `+keptSteps+` || (`+stepObject("'set_aside'", "recovery_point", "$5", "claims")+`
		                      || jsonb_build_object('detail', $4::text))
		WHERE id = $1 AND lock_token = $2 AND recovery_point = $3`,
		key.ID, key.lockToken(), from, reason, s.actor)
	return &queuedPhase{next: from, settle: func() {
		s.metrics.Outcome(metrics.OutcomeNeedsAttention)
		key.AttentionReason = &reason
		key.LockedAt, key.LockToken = nil, nil
		annotate(ctx, key)
	}}
}

// commit queues COMMIT and sends what is queued. A transaction that
// Postgres ends with ROLLBACK instead (it failed earlier) is
// pgx.ErrTxCommitRollback.
func (tx *Tx) commit(ctx context.Context) error {
	tx.Queue(`COMMIT`).Exec(func(tag pgconn.CommandTag) error {
		if tag.String() != "COMMIT" {
			return pgx.ErrTxCommitRollback
		}
		return nil
	})
	return tx.Flush(ctx)
}

// inTx runs fn's queued statements in one transaction, pipelined as a
// phase's are, but unfenced: for work on many keys at once (Reap).
func (s *Store) inTx(ctx context.Context, fn func(tx *Tx) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	defer rollback(ctx, conn.Conn()) // a no-op once committed

	tx := &Tx{conn: conn.Conn(), batch: &pgx.Batch{}}
	tx.Queue(`BEGIN`)
	if err := fn(tx); err != nil {
		return err
	}
	return tx.commit(ctx)
}

// rollback ends a phase's transaction after a failure. It runs even if
// ctx was cancelled. Should it fail, the connection is closed, which ends
// the transaction just as well.
func rollback(ctx context.Context, conn *pgx.Conn) {
	if conn.IsClosed() || conn.PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, `ROLLBACK`); err != nil {
		_ = conn.Close(ctx)
	}
}

// annotate names key and its recovery point on every line logged with ctx
// from now on (see package logctx).
func annotate(ctx context.Context, key *Key) {
	logctx.Set(ctx, slog.Int64(logctx.IdempotencyKeyID, key.ID), slog.String(logctx.RecoveryPoint, string(key.RecoveryPoint)))
}

// RecordUnknownOutcome counts an attempt at the foreign state mutation
// that ended in an error that may have executed, and returns the count. It
// is fenced like a phase.
func (s *Store) RecordUnknownOutcome(ctx context.Context, key *Key) (int, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := s.pool.QueryRow(ctx, `
		UPDATE idempotency_keys
		SET unknown_outcomes = unknown_outcomes + 1,
		    steps = `+step("'unknown_outcome'", "recovery_point", "$3", "claims")+`
		WHERE id = $1 AND lock_token = $2
		RETURNING unknown_outcomes`,
		key.ID, key.lockToken(), s.actor,
	).Scan(&key.UnknownOutcomes)
	if errors.Is(err, pgx.ErrNoRows) {
		s.metrics.Outcome(metrics.OutcomeLockLost)
		return 0, fmt.Errorf("record unknown outcome on key %d: %w", key.ID, ErrLockLost)
	}
	if err != nil {
		return 0, fmt.Errorf("record unknown outcome on key %d: %w", key.ID, err)
	}
	return key.UnknownOutcomes, nil
}

// Unlock releases key after a failure so that a retry need not wait for
// the lock to go stale. It keeps the recovery point: the retry resumes
// where this request stopped. The lock is released only if this request
// still holds it. Unlock runs even if ctx was cancelled (the client hung
// up), since that is exactly when a retry is coming.
func (s *Store) Unlock(ctx context.Context, key *Key) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `
		UPDATE idempotency_keys
		SET locked_at = NULL, lock_token = NULL,
		    steps = `+step("'unlocked'", "recovery_point", "$3", "claims")+`
		WHERE id = $1 AND lock_token = $2`,
		key.ID, key.lockToken(), s.actor,
	); err != nil {
		return fmt.Errorf("unlock idempotency key %d: %w", key.ID, err)
	}
	return nil
}

// newLockToken is a fresh fencing token.
func newLockToken() pgtype.UUID { return pgtype.UUID{Bytes: uuid.New(), Valid: true} }

// lockToken is k's lock token as a query argument. pgtype.UUID is encoded
// straight to Postgres's binary format; uuid.UUID would go through its
// driver.Valuer as text and be parsed back, on every statement of every
// phase.
func (k *Key) lockToken() pgtype.UUID {
	if k.LockToken == nil {
		return pgtype.UUID{}
	}
	return pgtype.UUID{Bytes: *k.LockToken, Valid: true}
}

func collectKey(rows pgx.Rows) (*Key, error) {
	keys, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByName[Key])
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, nil
	}
	return keys[0], nil
}
