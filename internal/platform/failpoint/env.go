//go:build failpoints

package failpoint

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/rocketrides/rocketrides/internal/platform/config"
)

// FromEnv arms failpoints from $FAILPOINTS, a comma-separated list of
// name=action, where action is:
//
//	kill   the process SIGKILLs itself: a crash with no cleanup at all
//	error  the request fails there with an error
//
// Only binaries built with -tags failpoints read it, so a production
// binary cannot be made to crash by its environment.
func FromEnv() Func {
	var env config.Env
	spec := env.String("FAILPOINTS", "")
	if spec == "" {
		return nil
	}
	actions := map[string]string{}
	for _, item := range strings.Split(spec, ",") {
		name, action, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || (action != "kill" && action != "error") {
			panic(fmt.Sprintf("FAILPOINTS: %q is not name=kill or name=error", item))
		}
		actions[name] = action
	}
	return func(_ context.Context, name string) error {
		switch actions[name] {
		case "kill":
			fmt.Fprintf(os.Stderr, "failpoint %s: killing process\n", name)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // never reached: SIGKILL cannot be caught
		case "error":
			return fmt.Errorf("failpoint %s", name)
		}
		return nil
	}
}
