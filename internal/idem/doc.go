// Package idem is the idempotency-key store. It owns idempotency_keys and
// the mechanics every idempotent endpoint shares: Claim, the first atomic
// phase (a new key, a replay, a refusal, or a takeover); Phase, one atomic
// phase fenced by the key's lock token; Unlock, after a failure; and the
// completer's and reaper's statements, ClaimAbandoned and Reap.
//
// A first reading takes the mechanism as Postgres receives it, one
// statement at a time (Config.Plain): key.go, claim.go, phase.go and
// abandoned.go. The fast path, the default, decides the same in fewer
// round trips (fastpath.go, pipeline.go, fence.go); the tests run both.
// The other files are named for what they add to the article.
package idem
