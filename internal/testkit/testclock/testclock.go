// Package testclock is a clock that stands still until its test moves
// it, for the Config.Now of a package that keeps time (the Stripe fake,
// the rate limits): what the test checks then does not depend on its pace.
package testclock

import (
	"sync"
	"time"
)

// Clock is a clock a test sets; safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a Clock standing at start.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now is the time the clock stands at.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
