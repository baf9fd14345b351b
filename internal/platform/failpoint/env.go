//go:build failpoints

package failpoint

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/rocketrides/rocketrides/internal/platform/config"
)

// FromEnv arms failpoints from $FAILPOINTS, a comma-separated list of
// name=action, where action is:
//
//	kill       the process SIGKILLs itself: a crash with no cleanup at all
//	error      the request fails there with an error
//	sleep:<d>  the request pauses there for duration d (such as 2s): a
//	           window for another fault, such as a database failover,
//	           to land at that seam
//
// Only binaries built with -tags failpoints read it, so a production
// binary cannot be made to crash by its environment.
func FromEnv() *Set {
	var env config.Env
	spec := env.String("FAILPOINTS", "")
	if spec == "" {
		return nil
	}
	set := &Set{}
	for _, item := range strings.Split(spec, ",") {
		name, action, ok := strings.Cut(strings.TrimSpace(item), "=")
		switch d, isSleep := strings.CutPrefix(action, "sleep:"); {
		case ok && isSleep:
			pause, err := time.ParseDuration(d)
			if err != nil || pause <= 0 {
				panic(fmt.Sprintf("FAILPOINTS: %q: sleep needs a positive duration", item))
			}
			set.Arm(name, func(ctx context.Context) error {
				// Said as the pause starts, so that a test lands its fault
				// inside the window, not after it.
				fmt.Fprintf(os.Stderr, "failpoint %s: sleeping %s\n", name, pause)
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(pause):
					return nil
				}
			})
		case ok && action == "kill":
			set.Arm(name, func(context.Context) error {
				fmt.Fprintf(os.Stderr, "failpoint %s: killing process\n", name)
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // never reached: SIGKILL cannot be caught
			})
		case ok && action == "error":
			set.Arm(name, func(context.Context) error { return fmt.Errorf("failpoint %s", name) })
		default:
			panic(fmt.Sprintf("FAILPOINTS: %q is not name=kill, name=error or name=sleep:<duration>", item))
		}
	}
	return set
}
