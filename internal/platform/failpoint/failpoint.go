// Package failpoint marks the seams of a request where a crash or an error
// can be injected, so that tests can prove the request recovers from a
// failure at each of them. In production no failpoint is armed: the Set is
// nil and each seam costs one nil check.
package failpoint

import (
	"context"
	"sync"

	"github.com/rocketrides/rocketrides/internal/platform/config"
)

// Set is the failpoints armed in a process, by seam name. A nil *Set arms
// none. It is safe for concurrent use: a test may arm and disarm seams
// while requests pass them.
type Set struct {
	mu     sync.Mutex
	points map[string]func(context.Context) error
}

// Arm arms seam name: fn runs whenever a request passes it. A non-nil error
// fails the request there as if the operation at the seam had failed; fn
// may also end the process to model a crash. A nil fn disarms the seam.
func (s *Set) Arm(name string, fn func(context.Context) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fn == nil {
		delete(s.points, name)
		return
	}
	if s.points == nil {
		s.points = map[string]func(context.Context) error{}
	}
	s.points[name] = fn
}

// Armed reports whether seam name is armed. Code that would pass a seam
// only by splitting work it otherwise sends together (two atomic phases in
// one pipeline) asks first, and splits only then.
func (s *Set) Armed(name string) bool { return s.point(name) != nil }

// At runs the failpoint armed at seam name, if any.
func (s *Set) At(ctx context.Context, name string) error {
	if fn := s.point(name); fn != nil {
		return fn(ctx)
	}
	return nil
}

func (s *Set) point(name string) func(context.Context) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.points[name]
}

// Variables declares FAILPOINTS, read only by binaries built with -tags
// failpoints (the crash tests' and the chaos soak's).
var Variables = config.Declare(
	config.Setting{Name: "FAILPOINTS", Type: config.TypeString,
		Help: "test builds only (-tags failpoints): crash, fail or pause at named seams, as name=kill, name=error or name=sleep:<duration>, comma-separated; production builds ignore it"},
)
