package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"regexp"
	"strconv"
	"time"
)

// Env reads a process's settings one after the other and keeps every
// error, so that a process with several bad settings names them all at
// once instead of one per restart. Each method returns the zero value for
// a bad setting; check Err before using any of them.
//
// Each method returns def when the variable is unset or empty. Its name
// says what it does with zero: Duration, Int and Fraction refuse it, and
// their OrZero forms (and Port) honour it, for the settings where zero
// means something and the caller hands it on as such.
type Env struct{ errs []error }

// String returns $name, or def when it is unset or empty.
func (e *Env) String(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Required returns $name, or records an error naming it when it is unset
// or empty.
func (e *Env) Required(name string) string {
	v := os.Getenv(name)
	if v == "" {
		e.errs = append(e.errs, fmt.Errorf("%s must be set", name))
	}
	return v
}

// Duration parses $name as a positive Go duration ("90s", "5m"), or
// returns def. Zero and negative durations are refused.
func (e *Env) Duration(name string, def time.Duration) time.Duration {
	d, ok := e.duration(name, def)
	if ok && d <= 0 {
		e.fail(name, os.Getenv(name), "must be positive")
		return 0
	}
	return d
}

// DurationOrZero is Duration for a setting where zero means something:
// zero is returned as it is, negative durations are refused.
func (e *Env) DurationOrZero(name string, def time.Duration) time.Duration {
	d, ok := e.duration(name, def)
	if ok && d < 0 {
		e.fail(name, os.Getenv(name), "must not be negative")
		return 0
	}
	return d
}

func (e *Env) duration(name string, def time.Duration) (d time.Duration, set bool) {
	v := os.Getenv(name)
	if v == "" {
		return def, false
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		e.fail(name, v, "not a duration such as 90s or 5m")
		return 0, false
	}
	return d, true
}

// Int parses $name as a positive integer, or returns def. Zero and
// negative numbers are refused.
func (e *Env) Int(name string, def int) int {
	n, ok := e.int(name, def)
	if ok && n <= 0 {
		e.fail(name, os.Getenv(name), "must be positive")
		return 0
	}
	return n
}

// IntOrZero is Int for a setting where zero means something: zero is
// returned as it is, negative numbers are refused.
func (e *Env) IntOrZero(name string, def int) int {
	n, ok := e.int(name, def)
	if ok && n < 0 {
		e.fail(name, os.Getenv(name), "must not be negative")
		return 0
	}
	return n
}

// Port parses $name as a TCP port, or returns def. Zero is honoured: it
// asks for any free port, which the process logs once it listens.
func (e *Env) Port(name string, def int) int {
	n, ok := e.int(name, def)
	if ok && (n < 0 || n > math.MaxUint16) {
		e.fail(name, os.Getenv(name), "must be a port number from 0 (any free port) to 65535")
		return 0
	}
	return n
}

// Host returns $name, the host a listener binds to (an IP address such as
// 127.0.0.1, 0.0.0.0 or ::1, or a host name), or def. A value with a port
// is refused: the port is a setting of its own.
func (e *Env) Host(name, def string) string {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	if net.ParseIP(v) == nil && !hostName.MatchString(v) {
		e.fail(name, v, "not an IP address or host name such as 127.0.0.1 or 0.0.0.0 (without a port)")
		return ""
	}
	return v
}

// hostName is a DNS name as RFC 1123 allows it.
var hostName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$`)

func (e *Env) int(name string, def int) (n int, set bool) {
	v := os.Getenv(name)
	if v == "" {
		return def, false
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		e.fail(name, v, "not an integer")
		return 0, false
	}
	return n, true
}

// Fraction parses $name as a share above 0 and at most 1, such as 0.25,
// or returns def. Zero is refused.
func (e *Env) Fraction(name string, def float64) float64 {
	f, ok := e.float(name, def)
	if ok && (f <= 0 || f > 1) {
		e.fail(name, os.Getenv(name), "must be above 0 and at most 1")
		return 0
	}
	return f
}

// FractionOrZero is Fraction for a setting where zero means something:
// it accepts 0 to 1.
func (e *Env) FractionOrZero(name string, def float64) float64 {
	f, ok := e.float(name, def)
	if ok && (f < 0 || f > 1) {
		e.fail(name, os.Getenv(name), "must be from 0 to 1")
		return 0
	}
	return f
}

func (e *Env) float(name string, def float64) (f float64, set bool) {
	v := os.Getenv(name)
	if v == "" {
		return def, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		e.fail(name, v, "not a decimal number such as 0.25")
		return 0, false
	}
	return f, true
}

// Bool parses $name as a boolean (true/false/1/0), or returns def.
func (e *Env) Bool(name string, def bool) bool {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.fail(name, v, "not true or false")
		return false
	}
	return b
}

// Err is every error met so far, joined, or nil.
func (e *Env) Err() error { return errors.Join(e.errs...) }

// fail records that $name=value is refused, and why.
func (e *Env) fail(name, value, why string) {
	e.errs = append(e.errs, fmt.Errorf("%s=%s: %s", name, value, why))
}
