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
// A first reading takes the article's mechanism in three files: key.go
// (the key and its recovery points), claim.go (the claim) and phase.go (an
// atomic phase, and unlock). Each of the others is named for the machinery
// it holds: fastpath.go (the claim in one statement), pipeline.go (a
// phase in one round trip, two in one pipeline), fence.go (the fence's
// SQL and its errors), tombstone.go (reaped keys and the 410),
// attention.go (keys set aside for a person), steps.go (each key's story),
// abandoned.go (the completer's claim and the reaper's delete), read.go
// (the console's reads) and store.go (the Store and its Config).
//
// The store reports what it sees: each claim's outcome and each phase's
// duration to Config.Metrics, and the key's id and current recovery point
// to the log attributes of the request's context (package logctx), so
// every line a request logs names the key it is working.
package idem
