package rides

import (
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Timestamp is a moment as the API shows it: RFC 3339 in UTC with exactly
// six fractional digits, the microseconds Postgres stores. time.Time's own
// encoding drops trailing zeros, so one ride's created_at would be
// ".1234Z" and the next ".123456Z", and a client parsing a fixed layout
// would fail on some rides and not others.
type Timestamp struct{ time.Time }

// timestampLayout is RFC 3339 with exactly six fractional digits.
const timestampLayout = "2006-01-02T15:04:05.000000Z07:00"

// MarshalJSON encodes t as a JSON string in timestampLayout, in UTC.
func (t Timestamp) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, len(timestampLayout)+2)
	b = append(b, '"')
	b = t.UTC().Truncate(time.Microsecond).AppendFormat(b, timestampLayout)
	return append(b, '"'), nil
}

// ScanTimestamptz reads a timestamptz column (pgx's scanning interface).
func (t *Timestamp) ScanTimestamptz(v pgtype.Timestamptz) error {
	if !v.Valid {
		return errors.New("scan timestamp: NULL")
	}
	t.Time = v.Time
	return nil
}
