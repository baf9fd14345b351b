// Package migrations embeds the SQL that defines the schema, so that every
// binary carries the schema it was built against.
//
// The schema is one migration, 000001_schema, to be read top to bottom.
// Until the first tagged release it is edited in place rather than
// followed by new migrations: nothing is deployed, and `make clean` resets
// a dev database built from an earlier version. testdata/schema.sql holds
// the schema as pg_dump prints it; TestSchema compares the two, so every
// change to the schema shows in review as a change to that file.
package migrations

import "embed"

// FS holds the golang-migrate files (NNNNNN_name.up.sql / .down.sql).
//
//go:embed *.sql
var FS embed.FS
