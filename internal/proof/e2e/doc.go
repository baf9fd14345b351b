// Package e2e holds black-box tests of Rocket Rides: the project's real
// binaries run as processes (package fleet), talk to real Postgres and to
// the Stripe fake over HTTP, and are crashed with SIGKILL at the seams of
// a ride request, restarted, cut off from their database and raced
// against each other. The tests then judge the outcome only by what
// clients saw and what Postgres and Stripe hold (package invariant): the
// promise of the idempotency-keys design is that a customer is charged
// exactly once per ride whatever happened in between. One test also
// reads the processes' traces back from an OTLP receiver.
//
// The package has no code of its own outside its tests.
package e2e
