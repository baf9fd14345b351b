// Command simulator keeps the API busy the way the original app's simulator
// does: a ride every 0-2 s as the demo user, under a fresh idempotency key,
// about half of them asking the API to fail on purpose so that the
// completer has something to recover. It prints one line per attempt and
// retries like a good client (see internal/dev/simulator).
//
// Settings, from the environment or the flags (flags win):
//
//	API_URL                 -url          the API (default http://127.0.0.1:5000)
//	SIMULATOR_TOKEN         -token        API token (default $SEED_USER_TOKEN, else
//	                                      the seed's dev token of user@example.com)
//	SIMULATOR_ERROR_RATE    -error-rate   share of rides sent with raise_error=true (0.5)
//	SIMULATOR_MAX_PAUSE     -max-pause    rides are a random 0 to this apart (2s)
//	SIMULATOR_TIMEOUT       -timeout      one HTTP attempt (30s)
//	SIMULATOR_MAX_ATTEMPTS  -attempts     attempts per ride, the first included (5)
//	SIMULATOR_MAX_BACKOFF   -max-backoff  longest wait between attempts (10s)
//
// -wait D polls the API's /healthz for up to D before the first ride, so the
// simulator can start alongside the API. -n N sends N rides and exits, with
// status 1 if any of them failed or gave up (simulated failures are
// expected); -once is -n 1. Otherwise it runs until SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/rocketrides/rocketrides/internal/dev/simulator"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/process"
)

// defaultToken is the token cmd/seed gives user@example.com by default.
const defaultToken = "rr_dev_token_user_0123456789"

func main() {
	s := readSettings(flag.CommandLine)
	process.Main(&process.Config{Name: "simulator", Build: s.build})
}

// settings are the simulator's settings: the environment's, then the
// flags', which win.
type settings struct {
	env     config.Env
	sim     simulator.Config
	timeout time.Duration
	once    bool
	wait    time.Duration
	logger  *slog.Logger
}

// readSettings reads the environment and defines the flags on flags, with
// the environment's values as their defaults; process.Main parses them.
func readSettings(flags *flag.FlagSet) *settings {
	s := &settings{}
	env := &s.env
	s.sim = simulator.Config{
		URL:   env.String("API_URL", "http://127.0.0.1:5000"),
		Token: env.String("SIMULATOR_TOKEN", env.String("SEED_USER_TOKEN", defaultToken)),
		// Zero honoured: no ride asks for a failure.
		ErrorRate: env.FractionOrZero("SIMULATOR_ERROR_RATE", 0.5),
		// Zero honoured: rides back to back.
		MaxPause: env.DurationOrZero("SIMULATOR_MAX_PAUSE", 2*time.Second),
		Retry: simulator.Policy{
			MaxAttempts: env.Int("SIMULATOR_MAX_ATTEMPTS", simulator.DefaultMaxAttempts),
			MaxDelay:    env.Duration("SIMULATOR_MAX_BACKOFF", simulator.DefaultMaxDelay),
		},
		Out: os.Stdout,
	}
	s.timeout = env.Duration("SIMULATOR_TIMEOUT", simulator.DefaultTimeout)

	flags.StringVar(&s.sim.URL, "url", s.sim.URL, "the API's base URL (env API_URL)")
	flags.StringVar(&s.sim.Token, "token", s.sim.Token, "API token to send rides with (env SIMULATOR_TOKEN)")
	flags.Float64Var(&s.sim.ErrorRate, "error-rate", s.sim.ErrorRate, "share of rides sent with raise_error=true (env SIMULATOR_ERROR_RATE)")
	flags.DurationVar(&s.sim.MaxPause, "max-pause", s.sim.MaxPause, "rides are a random 0 to this apart (env SIMULATOR_MAX_PAUSE)")
	flags.DurationVar(&s.timeout, "timeout", s.timeout, "timeout of one HTTP attempt (env SIMULATOR_TIMEOUT)")
	flags.IntVar(&s.sim.Retry.MaxAttempts, "attempts", s.sim.Retry.MaxAttempts, "attempts per ride, the first included (env SIMULATOR_MAX_ATTEMPTS)")
	flags.DurationVar(&s.sim.Retry.MaxDelay, "max-backoff", s.sim.Retry.MaxDelay, "longest wait between attempts (env SIMULATOR_MAX_BACKOFF)")
	flags.IntVar(&s.sim.Rides, "n", 0, "send this many rides and exit (0: until stopped)")
	flags.BoolVar(&s.once, "once", false, "send one ride and exit (-n 1)")
	flags.DurationVar(&s.wait, "wait", 0, "poll the API's /healthz this long before the first ride")
	return s
}

func (s *settings) build(_ context.Context, logger *slog.Logger) (*process.Program, error) {
	if err := s.env.Err(); err != nil {
		return nil, err
	}
	s.logger = logger
	if s.once {
		s.sim.Rides = 1
	}
	if s.sim.Rides < 0 || s.sim.Retry.MaxAttempts < 1 || s.timeout <= 0 {
		return nil, errors.New("-n must be 0 or more, -attempts 1 or more and -timeout positive")
	}
	s.sim.Client = &http.Client{Timeout: s.timeout}
	sim, err := simulator.New(&s.sim)
	if err != nil {
		return nil, err
	}
	return &process.Program{
		Run: func(ctx context.Context) error { return s.run(ctx, sim) },
		Settings: []slog.Attr{
			slog.String("api_url", s.sim.URL),
			slog.Float64("error_rate", s.sim.ErrorRate),
			slog.Duration("max_pause", s.sim.MaxPause),
			slog.Int("rides", s.sim.Rides),
		},
	}, nil
}

// run sends rides until ctx ends or the -n rides are sent. It fails when
// any of those -n rides failed or gave up (simulated failures are
// expected).
func (s *settings) run(ctx context.Context, sim *simulator.Simulator) error {
	if s.wait > 0 {
		if err := sim.WaitReady(ctx, s.wait); err != nil {
			return err
		}
	}
	tally := sim.Run(ctx)
	s.logger.InfoContext(ctx, "Sent rides",
		slog.Int("sent", tally.Sent),
		slog.Int("succeeded", tally.Succeeded),
		slog.Int("simulated_failures", tally.SimulatedFailures),
		slog.Int("failed", tally.Failed),
		slog.Int("gave_up", tally.GaveUp))
	if s.sim.Rides > 0 && tally.Failed+tally.GaveUp > 0 {
		return fmt.Errorf("%d of %d rides failed or gave up", tally.Failed+tally.GaveUp, tally.Sent)
	}
	return nil
}
