// Package failpoint marks the seams of a request where a crash or an error
// can be injected, so that tests can prove the request recovers from a
// failure at each of them. In production no failpoint is set and each seam
// costs one nil check.
package failpoint

import (
	"context"

	"github.com/rocketrides/rocketrides/internal/platform/config"
)

// Func is called at every named seam. A non-nil error fails the request
// there as if the operation at the seam had failed; a Func may also end
// the process to model a crash.
type Func func(ctx context.Context, name string) error

// At runs f at the seam name. A nil Func does nothing.
func (f Func) At(ctx context.Context, name string) error {
	if f == nil {
		return nil
	}
	return f(ctx, name)
}

// Variables declares FAILPOINTS, read only by binaries built with -tags
// failpoints (the crash tests' and the chaos soak's).
var Variables = config.Declare(
	config.Setting{Name: "FAILPOINTS", Type: config.TypeString,
		Help: "test builds only (-tags failpoints): crash or fail at named seams, as name=kill or name=error, comma-separated; production builds ignore it"},
)
