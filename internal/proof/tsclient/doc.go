// Package tsclient proves the TypeScript client (client-ts/) with the
// project's own test runner: it installs and builds the client with npm,
// runs its node tests against the real api (the project's binaries as
// processes, the Stripe fake, a seeded database), and runs cmd/clientcheck
// against its command, as a team with a client of its own would.
//
// The package has no code of its own outside its tests.
package tsclient
