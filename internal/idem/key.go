// First reading: the idempotency key, a row of idempotency_keys, what a
// client asked for under it (Request) and the response it replays; its
// recovery points are Started and Finished here, and the endpoint's own
// between them (rides.RideCreated, rides.ChargeCreated).
//
// Left to a second reading: the key's columns beyond the article, each
// used in its own file (rides.StripeKey, attention.go, steps.go).

package idem

import (
	"encoding/json"
	"errors"
	"net/netip"
	"time"

	"github.com/google/uuid"
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

// ErrKeyReused means the key was first used for a different request
// (method, path or parameters): a client bug.
var ErrKeyReused = errors.New("idempotency key reused with a different request")

// ErrInFlight means another request holds the key's lock.
var ErrInFlight = errors.New("idempotency key is in use by another request")

// ErrLockLost means the key was taken over, or deleted, under the phase.
var ErrLockLost = errors.New("idempotency key lock lost")

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

	// Beyond the article, each explained where it is used.
	Identity              *uuid.UUID `db:"identity"`                 // of keys charged under an older Stripe key (rides.StripeKey)
	FirstForeignAttemptAt *time.Time `db:"first_foreign_attempt_at"` // AdvanceToForeignCall
	UnknownOutcomes       int        `db:"unknown_outcomes"`         // RecordUnknownOutcome
	AttentionReason       *string    `db:"attention_reason"`         // SetAside: no request or completer works it
	Claims                int        `db:"claims"`                   // the claims so far, each step's attempt (Step)
}

// Response is a finished key's stored response.
type Response struct {
	Code int
	Body json.RawMessage
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
	// Params is the request's parameters as canonical JSON, compared as
	// JSONB; a reaped key's record keeps a hash of their JSONB text, where
	// 1 is not 1.0. A json.RawMessage, which pgx sends as JSON text in
	// every exec mode, where a []byte would go as bytea.
	Params   json.RawMessage
	OriginIP netip.Addr
	// Guard, when not nil, is a check the claim makes first (guard.go).
	Guard *Guard
}
