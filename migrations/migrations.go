// Package migrations embeds the SQL that defines the schema, so that every
// binary carries the schema it was built against.
//
// The schema starts with one migration, 000001_schema, to be read top to
// bottom: nothing had been deployed when the history that led to it was
// squashed. Every change since is a new numbered pair (000002_ride_status,
// ...); an applied migration is never edited.
package migrations

import "embed"

// FS holds the golang-migrate files (NNNNNN_name.up.sql / .down.sql).
//
//go:embed *.sql
var FS embed.FS
