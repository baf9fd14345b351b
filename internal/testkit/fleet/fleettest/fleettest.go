// Package fleettest starts a fleet.Fleet for a test: its processes are
// stopped when the test ends, and their logs are printed when it failed.
// It is separate from fleet so that cmd/chaos does not link package
// testing.
package fleettest

import (
	"context"
	"testing"
	"time"

	"github.com/rocketrides/rocketrides/internal/testkit/fleet"
)

// logLines is how much of each process's log a failed test prints.
const logLines = 80

// New returns a Fleet whose processes get env (KEY=VALUE) on top of their
// own settings. The binaries are built on first use in the test binary; a
// build failure fails the test.
func New(tb testing.TB, env ...string) *fleet.Fleet {
	tb.Helper()
	f, err := fleet.New(&fleet.Config{LogDir: tb.TempDir(), Env: env})
	if err != nil {
		tb.Fatalf("fleettest: %v", err)
	}
	// Registered after TempDir's removal, so it runs before it: the logs
	// are still there to print.
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("fleettest: logs of the test's processes:\n%s", f.Logs(logLines))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := f.Stop(ctx); err != nil {
			tb.Errorf("fleettest: stop processes: %v", err)
		}
	})
	return f
}

// Start starts command name in f (see fleet.Fleet.Start) or fails the
// test.
func Start(tb testing.TB, f *fleet.Fleet, name string, env ...string) *fleet.Process {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := f.Start(ctx, name, env...)
	if err != nil {
		tb.Fatalf("fleettest: %v", err)
	}
	return p
}

// Run runs command name to completion (see fleet.Fleet.Run) and returns
// its stdout, or fails the test.
func Run(tb testing.TB, f *fleet.Fleet, name string, env []string, args ...string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := f.Run(ctx, name, env, args...)
	if err != nil {
		tb.Fatalf("fleettest: %v", err)
	}
	return out
}
