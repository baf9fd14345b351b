// Command simulator keeps the API busy the way the original app's simulator
// does: a ride every 0-2 s as the demo user, under a fresh idempotency key,
// about half of them asking the API to fail on purpose so that the
// completer has something to recover. It prints one line per attempt and
// retries like a good client (see internal/dev/simulator).
//
// Its settings come from the environment (simulator -help lists them, as
// does docs/configuration.md), and each has a flag, which wins.
//
// -journal FILE (SIMULATOR_JOURNAL; make dev sets one under .data/) writes
// each ride down before its first try: killed mid-ride, even with kill -9,
// the simulator resumes the ride with its key when it starts again.
//
// -wait D polls the API's /healthz for up to D before the first ride, so the
// simulator can start alongside the API. -n N sends N rides and exits, with
// status 1 if any of them failed or gave up (simulated failures are
// expected); -once is -n 1. Otherwise it runs until SIGINT or SIGTERM.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/rocketrides/rocketrides/client"
	"github.com/rocketrides/rocketrides/internal/dev/simulator"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/process"
	"github.com/rocketrides/rocketrides/internal/user"
)

func main() { process.Main(command()) }

// command is the process, for main and its tests.
func command() *process.Config {
	s := &settings{}
	return &process.Config{Name: "simulator", Flags: s.defineFlags, Build: s.build}
}

// settings are the simulator's settings: the environment's, then the
// flags', which win.
type settings struct {
	flags   *flag.FlagSet
	sim     simulator.Config
	timeout time.Duration
	once    bool
	wait    time.Duration
	journal string
	logger  *slog.Logger
}

// defineFlags defines the flags on flags; process.Main parses them, and
// build lets those given win over the environment.
func (s *settings) defineFlags(flags *flag.FlagSet) {
	s.flags = flags
	flags.StringVar(&s.sim.URL, "url", "", "the API's base URL (default $API_URL)")
	flags.StringVar(&s.sim.Token, "token", "", "API token to send rides with (default $SIMULATOR_TOKEN)")
	flags.Float64Var(&s.sim.ErrorRate, "error-rate", 0, "share of rides sent with raise_error=true (default $SIMULATOR_ERROR_RATE)")
	flags.DurationVar(&s.sim.MaxPause, "max-pause", 0, "rides are a random 0 to this apart (default $SIMULATOR_MAX_PAUSE)")
	flags.DurationVar(&s.timeout, "timeout", 0, "timeout of one HTTP attempt (default $SIMULATOR_TIMEOUT)")
	flags.IntVar(&s.sim.Retry.MaxAttempts, "attempts", 0, "attempts per ride, the first included (default $SIMULATOR_MAX_ATTEMPTS)")
	flags.DurationVar(&s.sim.Retry.MaxDelay, "max-backoff", 0, "longest wait between attempts (default $SIMULATOR_MAX_BACKOFF)")
	flags.IntVar(&s.sim.Rides, "n", 0, "send this many rides and exit (0: until stopped)")
	flags.BoolVar(&s.once, "once", false, "send one ride and exit (-n 1)")
	flags.DurationVar(&s.wait, "wait", 0, "poll the API's /healthz this long before the first ride")
	flags.StringVar(&s.journal, "journal", "", "write each ride down in this file before its first try, and resume what it holds on start (default $SIMULATOR_JOURNAL)")
}

func (s *settings) build(_ context.Context, env *config.Env, logger *slog.Logger) (*process.Program, error) {
	given := map[string]bool{}
	if s.flags != nil {
		s.flags.Visit(func(f *flag.Flag) { given[f.Name] = true })
	}
	// Each setting from the environment unless its flag was given.
	fromEnv := func(flag string, set func()) {
		if !given[flag] {
			set()
		}
	}
	url := env.String("API_URL", "http://127.0.0.1:5000")
	token := env.String("SIMULATOR_TOKEN", "")
	seedToken := env.String("SEED_USER_TOKEN", user.DemoToken)
	errorRate := env.FractionOrZero("SIMULATOR_ERROR_RATE", 0.5)
	maxPause := env.DurationOrZero("SIMULATOR_MAX_PAUSE", 2*time.Second)
	maxAttempts := env.Int("SIMULATOR_MAX_ATTEMPTS", simulator.DefaultMaxAttempts)
	maxDelay := env.Duration("SIMULATOR_MAX_BACKOFF", simulator.DefaultMaxDelay)
	timeout := env.Duration("SIMULATOR_TIMEOUT", simulator.DefaultTimeout)
	journal := env.String("SIMULATOR_JOURNAL", "")
	if err := env.Err(); err != nil {
		return nil, err
	}
	fromEnv("url", func() { s.sim.URL = url })
	fromEnv("token", func() { s.sim.Token = cmp.Or(token, seedToken) })
	fromEnv("error-rate", func() { s.sim.ErrorRate = errorRate })
	fromEnv("max-pause", func() { s.sim.MaxPause = maxPause })
	fromEnv("attempts", func() { s.sim.Retry.MaxAttempts = maxAttempts })
	fromEnv("max-backoff", func() { s.sim.Retry.MaxDelay = maxDelay })
	fromEnv("timeout", func() { s.timeout = timeout })
	fromEnv("journal", func() { s.journal = journal })
	s.sim.Out = os.Stdout
	s.logger = logger
	if s.once {
		s.sim.Rides = 1
	}
	if s.sim.Rides < 0 || s.sim.Retry.MaxAttempts < 1 || s.timeout <= 0 {
		return nil, errors.New("-n must be 0 or more, -attempts 1 or more and -timeout positive")
	}
	s.sim.Client = &http.Client{Timeout: s.timeout}
	if s.journal != "" {
		j, err := client.NewFileJournal(s.journal)
		if err != nil {
			return nil, err
		}
		s.sim.Journal = j
	}
	sim, err := simulator.New(&s.sim)
	if err != nil {
		return nil, err
	}
	return &process.Program{
		Run: func(ctx context.Context) error { return s.run(ctx, sim) },
		// The flags' values win over the environment's.
		Settings: []slog.Attr{
			slog.String("api_url", s.sim.URL),
			slog.Float64("error_rate", s.sim.ErrorRate),
			slog.Duration("max_pause", s.sim.MaxPause),
			slog.Int("rides", s.sim.Rides),
			slog.String("journal", s.journal),
		},
	}, nil
}

// run resumes the journal's rides, then sends rides until ctx ends or the
// -n rides are sent. It fails when any of those rides failed or gave up
// (simulated failures are expected).
func (s *settings) run(ctx context.Context, sim *simulator.Simulator) error {
	if s.wait > 0 {
		if err := sim.WaitReady(ctx, s.wait); err != nil {
			return err
		}
	}
	tally := sim.Run(ctx)
	s.logger.InfoContext(ctx, "Sent rides",
		slog.Int("resumed", tally.Resumed),
		slog.Int("sent", tally.Sent),
		slog.Int("succeeded", tally.Succeeded),
		slog.Int("simulated_failures", tally.SimulatedFailures),
		slog.Int("failed", tally.Failed),
		slog.Int("gave_up", tally.GaveUp))
	if s.sim.Rides > 0 && tally.Failed+tally.GaveUp > 0 {
		return fmt.Errorf("%d of %d rides failed or gave up", tally.Failed+tally.GaveUp, tally.Resumed+tally.Sent)
	}
	return nil
}
