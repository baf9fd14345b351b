// Package migrations embeds the numbered SQL files that define the schema,
// so that every binary carries the schema it was built against.
package migrations

import "embed"

// FS holds the golang-migrate files (NNNNNN_name.up.sql / .down.sql).
//
//go:embed *.sql
var FS embed.FS
