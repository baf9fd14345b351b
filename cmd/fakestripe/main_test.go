package main

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// t.Setenv rules out t.Parallel in this file.

func TestBuild(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)

	t.Run("HonoursZeroPort", func(t *testing.T) {
		t.Setenv("PORT", "0")
		program, err := build(t.Context(), logger)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		require.NoError(t, program.Run(ctx))
	})

	t.Run("RefusesZeroKeyRetention", func(t *testing.T) {
		t.Setenv("PORT", "0")
		t.Setenv("FAKESTRIPE_KEY_RETENTION", "0s")
		_, err := build(t.Context(), logger)
		require.ErrorContains(t, err, "FAKESTRIPE_KEY_RETENTION=0s: must be positive")
	})
}
