// Package config reads the processes' settings from the environment, so
// that every knob is an env var with a documented default (.env.example)
// and a bad value stops the process with a message naming the variable.
package config

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/rocketrides/rocketrides/internal/platform/logctx"
)

// String returns $name, or def when it is unset or empty.
func String(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Required returns $name or an error naming it.
func Required(name string) (string, error) {
	v := os.Getenv(name)
	if v == "" {
		return "", fmt.Errorf("%s must be set", name)
	}
	return v, nil
}

// Duration parses $name as a Go duration ("90s", "5m"), or returns def.
func Duration(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q is not a duration such as 90s or 5m", name, v)
	}
	return d, nil
}

// Int parses $name as an integer, or returns def.
func Int(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q is not an integer", name, v)
	}
	return n, nil
}

// Float parses $name as a decimal number, or returns def.
func Float(name string, def float64) (float64, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%s=%q is not a decimal number such as 0.25", name, v)
	}
	return f, nil
}

// Bool parses $name as a boolean (true/false/1/0), or returns def.
func Bool(name string, def bool) (bool, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q is not true or false", name, v)
	}
	return b, nil
}

// Logger returns the process's structured logger: text by default, JSON
// when LOG_FORMAT=json, at LOG_LEVEL (debug, info, warn, error; default
// info). Lines logged with a context carry the attributes package logctx
// keeps in it (request id, user id, idempotency key id, recovery point).
// It also becomes slog's default.
func Logger(process string) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(String("LOG_LEVEL", "info"))); err != nil {
		return nil, fmt.Errorf("LOG_LEVEL: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch f := String("LOG_FORMAT", "text"); f {
	case "text":
		h = slog.NewTextHandler(os.Stderr, opts)
	case "json":
		h = slog.NewJSONHandler(os.Stderr, opts)
	default:
		return nil, fmt.Errorf("LOG_FORMAT=%q must be text or json", f)
	}
	logger := slog.New(logctx.NewHandler(h)).With("process", process)
	slog.SetDefault(logger)
	return logger, nil
}
