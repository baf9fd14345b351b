package main

import (
	"flag"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/testkit/proctest"
)

// t.Setenv rules out t.Parallel in this file.

func TestFlagsAndEnvironment(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)

	read := func(t *testing.T, args ...string) *settings {
		t.Helper()
		flags := flag.NewFlagSet("simulator", flag.ContinueOnError)
		flags.SetOutput(io.Discard)
		s := &settings{}
		s.defineFlags(flags)
		require.NoError(t, flags.Parse(args))
		return s
	}

	t.Run("HonoursZeroPauseAndErrorRate", func(t *testing.T) {
		t.Setenv("SIMULATOR_MAX_PAUSE", "0s")
		t.Setenv("SIMULATOR_ERROR_RATE", "0")
		s := read(t)
		_, err := s.build(t.Context(), &config.Env{}, logger)
		require.NoError(t, err)
		require.Zero(t, s.sim.MaxPause, "rides back to back")
		require.Zero(t, s.sim.ErrorRate, "no ride asks for a failure")
	})

	t.Run("RefusesZeroElse", func(t *testing.T) {
		t.Setenv("SIMULATOR_TIMEOUT", "0s")
		t.Setenv("SIMULATOR_MAX_ATTEMPTS", "0")
		t.Setenv("SIMULATOR_MAX_BACKOFF", "0s")
		t.Setenv("SIMULATOR_MAX_PAUSE", "-1s")
		_, err := read(t).build(t.Context(), &config.Env{}, logger)
		require.ErrorContains(t, err, "SIMULATOR_TIMEOUT=0s: must be positive")
		require.ErrorContains(t, err, "SIMULATOR_MAX_ATTEMPTS=0: must be positive")
		require.ErrorContains(t, err, "SIMULATOR_MAX_BACKOFF=0s: must be positive")
		require.ErrorContains(t, err, "SIMULATOR_MAX_PAUSE=-1s: must not be negative")
	})

	t.Run("FlagsWinOverTheEnvironment", func(t *testing.T) {
		t.Setenv("API_URL", "http://127.0.0.1:1")
		t.Setenv("SIMULATOR_MAX_PAUSE", "5s")
		s := read(t, "-url", "http://127.0.0.1:2", "-once")
		_, err := s.build(t.Context(), &config.Env{}, logger)
		require.NoError(t, err)
		require.Equal(t, "http://127.0.0.1:2", s.sim.URL)
		require.Equal(t, 5*time.Second, s.sim.MaxPause, "what no flag sets comes from the environment")
		require.Equal(t, 1, s.sim.Rides, "-once is -n 1")
	})
}

// -help lists every setting simulator reads, a mistyped one stops it, and its
// start line keeps secrets out.
func TestSettings(t *testing.T) {
	proctest.TestSettings(t, command, "API_URL", "http://127.0.0.1:1")
}
