// Package tsclient proves the TypeScript client (client-ts/) with the
// project's own test runner: it installs and builds the client with npm,
// runs its node tests against the real api (the project's binaries as
// processes, the Stripe fake, a seeded database). The conformance harness
// checks its command beside the Go client's (clientcheck.ProjectClients).
//
// The package has no code of its own outside its tests.
package tsclient
