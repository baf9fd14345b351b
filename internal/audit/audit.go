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
}

// Insert writes r inside tx.
func Insert(ctx context.Context, tx pgx.Tx, r Record) error {
	data, err := json.Marshal(r.Data)
	if err != nil {
		return fmt.Errorf("encode audit data for %s %d: %w", r.ResourceType, r.ResourceID, err)
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO audit_records (action, data, origin_ip, resource_id, resource_type, user_id)
		VALUES ($1, $2, $3, $4, $5, $6)`,
		r.Action, data, r.OriginIP, r.ResourceID, r.ResourceType, r.UserID,
	); err != nil {
		return fmt.Errorf("insert audit record %s for %s %d: %w", r.Action, r.ResourceType, r.ResourceID, err)
	}
	return nil
}
