// Package config reads the processes' settings from the environment, so
// that every knob is an env var with a documented default (.env.example)
// and a bad value stops the process with a message naming the variable.
//
// Env is the one way to read a setting. An unset or empty variable takes
// the default the caller names. A variable set to zero is never quietly
// swapped for that default: each method says whether zero is honoured,
// because it means something (DATABASE_MAX_CONNS=0 keeps pgx's pool size,
// PORT=0 listens on any free port, SIMULATOR_MAX_PAUSE=0s sends rides back
// to back), or refused with the variable's name (REAPER_MAX_AGE=0s: must
// be positive). Negative durations and counts are always refused.
package config

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/rocketrides/rocketrides/internal/platform/logctx"
)

// Logger returns the process's structured logger: text by default, JSON
// when LOG_FORMAT=json, at LOG_LEVEL (debug, info, warn, error; default
// info). Lines logged with a context carry the attributes package logctx
// keeps in it (request id, user id, idempotency key id, recovery point).
// It also becomes slog's default.
func Logger(process string) (*slog.Logger, error) {
	var env Env
	levelName := env.String("LOG_LEVEL", "info")
	format := env.String("LOG_FORMAT", "text")
	var level slog.Level
	if err := level.UnmarshalText([]byte(levelName)); err != nil {
		return nil, fmt.Errorf("LOG_LEVEL=%s: must be debug, info, warn or error", levelName)
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch format {
	case "text":
		h = slog.NewTextHandler(os.Stderr, opts)
	case "json":
		h = slog.NewJSONHandler(os.Stderr, opts)
	default:
		return nil, fmt.Errorf("LOG_FORMAT=%s: must be text or json", format)
	}
	logger := slog.New(logctx.NewHandler(h)).With(slog.String("process", process))
	slog.SetDefault(logger)
	return logger, nil
}
