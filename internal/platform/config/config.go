// Package config reads the processes' settings from the environment, so
// that every knob is an env var with a documented default and a bad value
// stops the process with a message naming the variable.
//
// Every setting is declared once, as data (Setting, Declare), by the
// package whose behaviour it changes. Env reads only declared settings and
// records each read, which is how a process's -help lists exactly what it
// reads, its start line logs the values in effect (secrets redacted), and
// docs/configuration.md (generated, `make docs`) documents every process.
// A variable with one of the project's prefixes that no process declares
// (REAPER_MAX_AGES) is refused at start, naming the nearest known name
// (Unknown).
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
	"io"
	"log/slog"

	"github.com/rocketrides/rocketrides/internal/platform/logctx"
)

// Logger returns the process's structured logger: text by default, JSON
// when LOG_FORMAT=json, at LOG_LEVEL (debug, info, warn, error; default
// info). Lines logged with a context carry the attributes package logctx
// keeps in it (request id, user id, idempotency key id, recovery point).
// It writes to w and also becomes slog's default.
func Logger(env *Env, process string, w io.Writer) (*slog.Logger, error) {
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
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("LOG_FORMAT=%s: must be text or json", format)
	}
	logger := slog.New(logctx.NewHandler(h)).With(slog.String("process", process))
	slog.SetDefault(logger)
	return logger, nil
}

// Variables are the settings every process reads through this package.
var Variables = Declare(
	Setting{Name: "LOG_LEVEL", Type: TypeString, Help: "the least severe log lines written: debug, info, warn or error"},
	Setting{Name: "LOG_FORMAT", Type: TypeString, Help: "log lines as text (key=value) or json"},
	Setting{Name: AllowUnknown, Type: TypeBool,
		Help: "start even when the environment holds a variable with one of the project's prefixes that no process defines (each is logged at WARN); for environments shared with other software"},
)
