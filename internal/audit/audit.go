// Package audit owns audit_records: an append-only account of who did what
// to which resource, and from where. A record is written in the same
// transaction as the change it describes, so the two commit or vanish
// together.
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	"github.com/jackc/pgx/v5"
)

// ActionRideCreated records the creation of a ride.
const ActionRideCreated = "ride.created"

// Record is one audited action.
type Record struct {
	Action       string
	Data         any // encoded as JSON
	OriginIP     netip.Addr
	ResourceID   int64
	ResourceType string
	UserID       int64

	// ResourceSequence, set instead of ResourceID, names the sequence
	// that gave the resource its id earlier in the same transaction: the
	// record takes the value the transaction drew last from it (currval),
	// so the insert of the resource and its record go out together,
	// without waiting for the resource's id.
	ResourceSequence string
}

// Queuer takes statements to send later, pipelined with others: an
// atomic phase's transaction (idem.Tx) or a pgx.Batch.
type Queuer interface {
	Queue(sql string, args ...any) *pgx.QueuedQuery
}

// Insert queues the insertion of r on q, to commit with the transaction
// that q's statements run in.
func Insert(q Queuer, r Record) error {
	data, err := json.Marshal(r.Data)
	if err != nil {
		return fmt.Errorf("encode audit data for %s %d: %w", r.ResourceType, r.ResourceID, err)
	}
	var resourceID, sequence any = r.ResourceID, nil // nil: NULL
	if r.ResourceSequence != "" {
		resourceID, sequence = nil, r.ResourceSequence
	}
	q.Queue(`
		INSERT INTO audit_records (action, data, origin_ip, resource_id, resource_type, user_id)
		VALUES ($1, $2, $3, coalesce($4::bigint, currval($7::text::regclass)), $5, $6)`,
		r.Action, json.RawMessage(data), r.OriginIP, resourceID, r.ResourceType, r.UserID, sequence)
	return nil
}

// Stored is an audit record as stored.
type Stored struct {
	ID           int64      `db:"id"`
	Action       string     `db:"action"`
	CreatedAt    time.Time  `db:"created_at"`
	Data         []byte     `db:"data"`
	OriginIP     netip.Addr `db:"origin_ip"`
	ResourceID   int64      `db:"resource_id"`
	ResourceType string     `db:"resource_type"`
	UserID       int64      `db:"user_id"`
}

// Querier reads records: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Of returns the history of one resource, oldest first.
func Of(ctx context.Context, q Querier, resourceType string, resourceID int64) ([]Stored, error) {
	rows, err := q.Query(ctx, `
		SELECT id, action, created_at, data, origin_ip, resource_id, resource_type, user_id
		FROM audit_records WHERE resource_type = $1 AND resource_id = $2
		ORDER BY id`, resourceType, resourceID)
	if err != nil {
		return nil, fmt.Errorf("read audit records of %s %d: %w", resourceType, resourceID, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[Stored])
	if err != nil {
		return nil, fmt.Errorf("read audit records of %s %d: %w", resourceType, resourceID, err)
	}
	return out, nil
}
