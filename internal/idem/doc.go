// Package idem is the idempotency-key store. It owns idempotency_keys and
// implements the mechanics every idempotent endpoint shares:
//
//   - Claim: the first atomic phase. It records a new key, or arbitrates an
//     existing one: refuse a reused key whose request differs, replay a
//     finished key's stored response, refuse a key another request is
//     working (409), or take over a key whose lock went stale.
//   - Phase: one atomic phase. It runs an endpoint's writes and moves the
//     key to its next recovery point (or finishes it with a response) in a
//     single transaction, fenced by the key's lock token.
//   - Unlock: release the key after a failure, so that a retry can resume
//     from the last recovery point.
//   - ClaimAbandoned and Reap: the completer's claim, and the reaper's.
//
// A first reading takes the mechanism as Postgres receives it, one
// statement at a time (Config.Plain): key.go, claim.go, phase.go and
// abandoned.go. The fast path, the default, sends the same decisions in
// fewer round trips: fastpath.go (the claim in one statement), pipeline.go
// and fence.go (a phase in one round trip, its move as the fence); the
// tests run both paths and hold them equal. The other files are named for
// what they hold beyond the article: tombstone.go, attention.go, guard.go,
// steps.go, read.go, store.go.
package idem
