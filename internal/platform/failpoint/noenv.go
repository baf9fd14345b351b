//go:build !failpoints

package failpoint

// FromEnv returns nil: production builds ignore $FAILPOINTS. Build with
// -tags failpoints to arm them from the environment.
func FromEnv() *Set { return nil }
