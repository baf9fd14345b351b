// Package proctest tests a command's build step (process.Config.Build):
// what it makes of the settings in its environment.
package proctest

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/process"
)

// Build is a command's build step.
type Build = func(ctx context.Context, logger *slog.Logger) (*process.Program, error)

// Setenv sets each NAME, value pair for the rest of the test. Like
// t.Setenv, it rules out t.Parallel.
func Setenv(t testing.TB, pairs ...string) {
	t.Helper()
	require.Zero(t, len(pairs)%2, "Setenv takes NAME, value pairs")
	for i := 0; i < len(pairs); i += 2 {
		t.Setenv(pairs[i], pairs[i+1])
	}
}

// RequireRefused builds with the environment as it is and requires the
// build to fail with an error naming each of wants.
func RequireRefused(t testing.TB, build Build, wants ...string) {
	t.Helper()
	program, err := build(t.Context(), slog.New(slog.DiscardHandler))
	if program != nil && program.Close != nil {
		program.Close()
	}
	require.Error(t, err)
	for _, want := range wants {
		require.ErrorContains(t, err, want)
	}
}
