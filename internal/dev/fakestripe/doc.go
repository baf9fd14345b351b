// Package fakestripe is a local stand-in for the part of Stripe's HTTP API
// that Rocket Rides uses: customers and charges, spoken in Stripe's own wire
// format so that the real stripe-go client talks to it unchanged. Its
// account lives in memory, and in a file too when Config.StatePath names
// one (journal.go), so that it survives a restart as the rides do.
//
// It exists so that the foreign state mutation at the centre of the
// idempotency-keys design, the charge, can be exercised end to end without a
// network or a Stripe account, including the failures that design is built to
// survive. It is therefore faithful where that matters and small everywhere
// else:
//
//   - Authentication. Every /v1 request needs a secret key, sent as
//     "Authorization: Bearer sk_..." or as the user of HTTP basic auth. Any
//     key that starts with "sk_" and has something after it is accepted; all
//     keys see the same objects, but idempotency keys are scoped per API key,
//     as they are at Stripe.
//   - Idempotency. A POST carrying an Idempotency-Key stores the first result
//     that began executing and replays it, byte for byte and with
//     "Idempotent-Replayed: true", to later requests with the same key and the
//     same parameters. Different parameters or a different endpoint get 400
//     idempotency_error; a request arriving while the first is still executing
//     gets 409 idempotency_error. Requests rejected before executing (bad
//     parameters, a customer or token that doesn't exist, FailNext) store
//     nothing, so a corrected retry with the same key runs; declines and
//     internal errors are stored like successes. Stored results are
//     forgotten after Config.KeyRetention (24h by default), counted on an
//     injectable clock from the key's first use.
//   - Test cards. Customers are created with a test token as their source:
//     TokenVisa can be charged, TokenChargeCustomerFail attaches but every
//     charge against it is declined (402 card_error, card_declined), and
//     TokenChargeDeclined is declined when attached. A declined charge is
//     recorded with status "failed", as Stripe records it.
//   - Faults. Tests drive failures through Server.SetFaults, or over HTTP
//     with POST /_fake/faults for black-box tests: failing the next requests
//     before they execute, slowing charges down, committing a charge and then
//     dropping the connection (the ambiguous timeout), dropping the answers
//     of the next requests whether they charge or replay (so that a client's
//     own resends with the same key are lost too), and storing an internal
//     error against an idempotency key. GET /_fake/stats counts what happened,
//     answers dropped included.
//
// Package fakestripetest starts a Server for a test and builds a stripe-go
// client pointed at it; cmd/fakestripe serves one on a port.
package fakestripe
