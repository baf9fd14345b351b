package main

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/testkit/proctest"
)

// t.Setenv rules out t.Parallel in this file.

func TestBuild(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)

	t.Run("HonoursZeroPort", func(t *testing.T) {
		t.Setenv("PORT", "0")
		program, err := build(t.Context(), &config.Env{}, logger)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		require.NoError(t, program.Run(ctx))
	})

	// /_fake/faults and the customer list answer anyone who reaches the
	// fake; it used to listen on all interfaces.
	t.Run("ListensOnLoopbackByDefault", func(t *testing.T) {
		t.Setenv("PORT", "0")
		t.Setenv("HOST", "") // unset, whatever the shell exports
		var logs bytes.Buffer
		program, err := build(t.Context(), &config.Env{}, slog.New(slog.NewTextHandler(&logs, nil)))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		require.NoError(t, program.Run(ctx))
		require.Contains(t, logs.String(), "server=fakestripe addr=127.0.0.1:")
	})

	t.Run("RefusesAHostWithAPort", func(t *testing.T) {
		t.Setenv("PORT", "0")
		t.Setenv("HOST", "127.0.0.1:12111")
		_, err := build(t.Context(), &config.Env{}, logger)
		require.ErrorContains(t, err, "HOST=127.0.0.1:12111: not an IP address or host name")
	})

	t.Run("RefusesZeroKeyRetention", func(t *testing.T) {
		t.Setenv("PORT", "0")
		t.Setenv("FAKESTRIPE_KEY_RETENTION", "0s")
		_, err := build(t.Context(), &config.Env{}, logger)
		require.ErrorContains(t, err, "FAKESTRIPE_KEY_RETENTION=0s: must be positive")
	})
}

// -help lists every setting fakestripe reads, a mistyped one stops it, and its
// start line keeps secrets out.
func TestSettings(t *testing.T) {
	proctest.TestSettings(t, command, "HOST", "", "PORT", "0")
}
