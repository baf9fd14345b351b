// Package reaper is the article's reaper. Idempotency keys exist so that
// a request can be retried safely, not as a permanent record of requests,
// so the reaper deletes keys once they are older than anyone will retry
// them (72 hours by default: long enough that a bug shipped on a Friday
// can be fixed on Monday and the completer still push its requests
// through).
//
// A key that never finished is not just dropped: it is copied to
// abandoned_requests, in the same statement that deletes it, and logged,
// so that a person can find out what failed. Rides outlive their keys.
//
// Every deleted key also leaves a compact record in reaped_keys, in that
// same statement, so that a client retrying after the key's lifetime is
// refused (410 idempotency_key_expired) instead of running its request,
// and its charge, a second time. The reaper keeps that table bounded too:
// a record is forgotten RetainReaped (30 days by default) after its key
// was first used, and only then may the key's value start a new request.
//
// The SQL lives with the tables' owner, idem (Store.Reap and
// Store.ForgetReaped); this package holds the loop.
package reaper
