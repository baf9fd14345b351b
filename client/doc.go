// Package client is the Go client of the Rocket Rides API, with the
// contract's retry protocol built in (docs/openapi.yaml, "The retry
// protocol"). It creates a ride, gets one and lists them.
//
// A ride request gets one idempotency key, made by the client (NewKey)
// or given by the caller, and every try of it sends that key and the
// same bytes of body. A try that may still complete is tried again: no
// answer at all, nor one from the API (a 502 or 504 that is not a
// problem document is a proxy's), 408, 409, 429, 500 and 503, or
// whatever the server's Rocket-Rides-Should-Retry header says, which wins
// over the status when it is present. Before retry n the client waits a random time between 0
// and min(MaxDelay, BaseDelay × 2^(n-1)) (full jitter, so that clients
// that failed together do not come back together), and never less than
// the answer's Retry-After. Every other answer is final and ends the
// request at once. The caller's context bounds the whole request: the
// client does not start a wait that would outlast the context's
// deadline, and gives up instead, returning the last answer.
//
// A key kept in memory dies with the app. With a Config.Journal (a
// FileJournal, which fsyncs every change), a ride is written down, key
// and bytes of body, before its first try, and crossed out only on a
// final answer; an app that starts again lists what is still pending
// (PendingRides) and resumes each ride (ResumeRide) before it offers a
// new one, so that no death of the app makes a second ride of one tap.
//
// A problem answer is returned as an *Error, carrying its code, the
// ride_id it names and whether it is final; a success as a *Ride with
// its status. Config.OnAttempt sees every try, for logs and metrics.
//
// # A layer over net/http, in a module of its own
//
// The package is written by hand over net/http rather than on the code
// oapi-codegen generates from docs/openapi.yaml (internal/testkit/apiclient,
// which keeps its own test that it is current). The generated client
// answers with one type per status and endpoint and gives up the raw
// exchange a retry loop decides on (status, Retry-After, the hint, the
// problem's code), so a retrying client built on it would unwrap it on
// every path; it also brings oapi-codegen's runtime with it. Three
// endpoints by hand, on the standard library alone, are shorter than the
// adapter, and read as the reference a Swift, Kotlin or TypeScript team
// ports (docs/clients.md).
//
// The package is a module of its own, github.com/rocketrides/rocketrides/client,
// with no requirement but the standard library: a program that imports
// it does not get the server's dependencies (Postgres, River, Stripe) in
// its build or its go.sum, nor the server's Go version. The server's
// module requires it with a replace directive pointing here, so that the
// project's own clients (the simulator, the chaos clients, the console's
// lab, the tests) use this package and no retry loop of their own.
package client
