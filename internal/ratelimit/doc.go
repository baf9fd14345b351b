// Package ratelimit owns the API's rate limits and their counts, the
// rate_limit_windows and rate_limit_charges tables. Three limits, each a Policy that a setting
// sets and 0 turns off (RATE_LIMITS=off turns all three off, for load
// tools):
//
//   - requests per API token ("token"), counted for every authenticated
//     request, before it is served;
//   - failed authentications per client address ("failed_auth"): past the
//     quota every request from the address is refused, a valid token's
//     too, until the window ends;
//   - charges per user ("charges"), against card testing: counted when a
//     ride request is about to create its ride and charge it, never for a
//     replay, in a sliding window (charges.go), so that no window of its
//     length, wherever it starts, holds more than the quota.
//
// A refusal is 429 rate_limited with Retry-After and the RateLimit and
// RateLimit-Policy header fields of the IETF httpapi draft
// (draft-ietf-httpapi-ratelimit-headers): Exceeded.Problem.
//
// # One count for every instance
//
// The counts live in Postgres, so every api instance (and the completer,
// for charges) adds to the same one: one INSERT ... ON CONFLICT DO
// UPDATE per sync. The edge's limits count in a fixed window per subject,
// which starts a new one once the last has ended: a token or an address
// can spend its quota at the end of one window and again at the start of
// the next, which costs a flood nothing it could not do in two windows.
// The charge cap slides instead, at the cost of eleven integers per user:
// there, twice the cap at once is twice the cards tested. The tables are
// UNLOGGED: a sync writes no WAL and its transaction commits without
// waiting for a WAL flush, so the one row all of a subject's requests
// update is locked for the statement alone. A crash or a failover empties
// them, which loses only counts.
//
// No count costs a round trip of its own on a request that passes:
//
//   - a ride's charge is counted in the round trip of its first atomic
//     phase, in a transaction of its own just ahead of the phase
//     (ChargeGuard, idem.Guard); it fails the table's CHECK (hits <=
//     quota) when the cap is reached, which stops the phase
//     and leaves the charge uncounted. Every charge is counted, exactly;
//   - what a request's token count and its address's failures need of
//     Postgres goes in the round trip that looks the token up (Queue);
//     most requests need nothing, and a claim whose token's user the api
//     remembers then makes no look-up at all (package api, remember.go);
//   - only a failed authentication costs one more (Failed), and is
//     counted exactly.
//
// # What an instance keeps
//
// A request is a token's hit, and replays of a finished key, the
// cheapest answers the api gives, come in storms. Writing the shared
// count on every one (an update of one row, with a transaction id and a
// commit) cut replays by a third in the bench. So each instance keeps a
// view of the counts it uses (view.go): below half a token's quota it
// counts the token's requests itself and adds them to the shared count at
// most every SyncEvery (100 ms), with the request that finds the last
// sync that old; from half the quota on, every request is added, and
// decided, in Postgres. An address's failures are read again at most
// every SyncEvery. A refusal, once Postgres has made it, is kept until
// its window ends (a count only grows within a window), so a flood of
// refused requests never reaches Postgres.
//
// What that costs in exactness: with one instance, nothing. With several,
// a token's requests that another instance has counted below half the
// quota, in the SyncEvery since its last sync, are not in the shared count
// yet; a token can pass its quota by those, which is less than half the
// quota per other instance and no more than the token sent them in a
// tenth of a second. An instance learns that an address was refused
// within SyncEvery of the failure that did it (at once, if it counted
// that failure itself). Charges and failed authentications are always
// counted exactly.
package ratelimit
