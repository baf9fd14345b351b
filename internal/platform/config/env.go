package config

import (
	"errors"
	"time"
)

// Env reads a process's settings one after the other and keeps every
// error, so that a process with several bad settings names them all at
// once instead of one per restart. Each method returns the zero value for
// a bad setting; check Err before using any of them.
type Env struct{ errs []error }

// Required is Required, collecting its error.
func (e *Env) Required(name string) string {
	v, err := Required(name)
	return keep(e, v, err)
}

// Duration is Duration, collecting its error.
func (e *Env) Duration(name string, def time.Duration) time.Duration {
	v, err := Duration(name, def)
	return keep(e, v, err)
}

// Int is Int, collecting its error.
func (e *Env) Int(name string, def int) int {
	v, err := Int(name, def)
	return keep(e, v, err)
}

// Float is Float, collecting its error.
func (e *Env) Float(name string, def float64) float64 {
	v, err := Float(name, def)
	return keep(e, v, err)
}

// Bool is Bool, collecting its error.
func (e *Env) Bool(name string, def bool) bool {
	v, err := Bool(name, def)
	return keep(e, v, err)
}

// Err is every error met so far, joined, or nil.
func (e *Env) Err() error { return errors.Join(e.errs...) }

// keep returns v, keeping err.
func keep[T any](e *Env, v T, err error) T {
	if err != nil {
		e.errs = append(e.errs, err)
	}
	return v
}
