// Package rides is the ride request, POST /rides: its parameters, its
// atomic phases and its HTTP handlers. It owns the rides table.
//
// A ride request is a small state machine whose states are recovery
// points. Each arrow is an atomic phase, one Postgres transaction that
// makes its writes and moves the recovery point together:
//
//	started ──(ride + audit record)──> ride_created
//	ride_created ──(Stripe charge, then record it)──> charge_created
//	charge_created ──(staged receipt job + stored 201)──> finished
//
// The Stripe charge is the one foreign state mutation. It happens between
// transactions, never inside one, and carries the idempotency key
// rocket-rides-<user id>-<SHA-256 of the client's key> (StripeKey), so
// that a request resumed after any crash, or retried after the database
// lost its row, asks Stripe for the same charge again and is charged at
// most once.
package rides
