package config

import (
	"fmt"
	"time"
)

// PositiveDuration is Duration for a setting that zero would switch off
// or make meaningless (a timeout, a retention). An explicit 0 is refused
// with the variable's name, never taken for "use the default" def.
func (e *Env) PositiveDuration(name string, def time.Duration) time.Duration {
	bad := len(e.errs)
	d := e.Duration(name, def)
	if len(e.errs) == bad && d <= 0 {
		e.errs = append(e.errs, fmt.Errorf("%s must be greater than zero (unset, it is %s)", name, def))
	}
	return d
}

// PositiveInt is Int for a count that must be at least 1; 0 and below
// are refused with the variable's name, never replaced by def.
func (e *Env) PositiveInt(name string, def int) int {
	bad := len(e.errs)
	n := e.Int(name, def)
	if len(e.errs) == bad && n <= 0 {
		e.errs = append(e.errs, fmt.Errorf("%s must be at least 1, got %d (unset, it is %d)", name, n, def))
	}
	return n
}
