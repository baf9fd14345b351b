package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckFlags(t *testing.T) {
	t.Parallel()

	t.Run("AcceptsFlagsAlone", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, checkFlags("", "", nil))
		require.NoError(t, checkFlags("cpu.pprof", "results.json", nil))
	})

	t.Run("RefusesArguments", func(t *testing.T) {
		t.Parallel()
		// "bench quick -only new": parsing stops at quick.
		require.EqualError(t, checkFlags("", "", []string{"quick", "-only", "new"}), `unexpected arguments ["quick" "-only" "new"]`)
	})

	t.Run("RefusesAFlagLikeFileName", func(t *testing.T) {
		t.Parallel()
		require.EqualError(t, checkFlags("-quick", "", nil), `-profile needs a file name, got the flag-like "-quick"`)
		require.EqualError(t, checkFlags("", "-quick", nil), `-json needs a file name, got the flag-like "-quick"`)
	})
}
