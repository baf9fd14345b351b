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
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rocketrides/rocketrides/internal/dev/simulator"
	"github.com/rocketrides/rocketrides/internal/platform/config"
)

// defaultToken is the token cmd/seed gives user@example.com by default.
const defaultToken = "rr_dev_token_user_0123456789"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "simulator:", err)
		os.Exit(1)
	}
}

func run() error {
	logger, err := config.Logger("simulator")
	if err != nil {
		return err
	}
	var env config.Env
	// Zero honoured: no ride asks for a failure.
	errorRate := env.FractionOrZero("SIMULATOR_ERROR_RATE", 0.5)
	// Zero honoured: rides back to back.
	maxPause := env.DurationOrZero("SIMULATOR_MAX_PAUSE", 2*time.Second)
	timeout := env.Duration("SIMULATOR_TIMEOUT", simulator.DefaultTimeout)
	attempts := env.Int("SIMULATOR_MAX_ATTEMPTS", simulator.DefaultMaxAttempts)
	maxBackoff := env.Duration("SIMULATOR_MAX_BACKOFF", simulator.DefaultMaxDelay)
	envURL := env.String("API_URL", "http://127.0.0.1:5000")
	envToken := env.String("SIMULATOR_TOKEN", env.String("SEED_USER_TOKEN", defaultToken))
	if err := env.Err(); err != nil {
		return err
	}

	apiURL := flag.String("url", envURL, "the API's base URL (env API_URL)")
	token := flag.String("token", envToken,
		"API token to send rides with (env SIMULATOR_TOKEN)")
	flag.Float64Var(&errorRate, "error-rate", errorRate, "share of rides sent with raise_error=true (env SIMULATOR_ERROR_RATE)")
	flag.DurationVar(&maxPause, "max-pause", maxPause, "rides are a random 0 to this apart (env SIMULATOR_MAX_PAUSE)")
	flag.DurationVar(&timeout, "timeout", timeout, "timeout of one HTTP attempt (env SIMULATOR_TIMEOUT)")
	flag.IntVar(&attempts, "attempts", attempts, "attempts per ride, the first included (env SIMULATOR_MAX_ATTEMPTS)")
	flag.DurationVar(&maxBackoff, "max-backoff", maxBackoff, "longest wait between attempts (env SIMULATOR_MAX_BACKOFF)")
	n := flag.Int("n", 0, "send this many rides and exit (0: until stopped)")
	once := flag.Bool("once", false, "send one ride and exit (-n 1)")
	wait := flag.Duration("wait", 0, "poll the API's /healthz this long before the first ride")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if *once {
		*n = 1
	}
	if *n < 0 || attempts < 1 {
		return errors.New("-n must be 0 or more and -attempts 1 or more")
	}

	sim, err := simulator.New(&simulator.Config{
		URL:       *apiURL,
		Token:     *token,
		ErrorRate: errorRate,
		MaxPause:  maxPause,
		Rides:     *n,
		Client:    &http.Client{Timeout: timeout},
		Retry:     simulator.Policy{MaxAttempts: attempts, MaxDelay: maxBackoff},
		Out:       os.Stdout,
	})
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	if *wait > 0 {
		if err := sim.WaitReady(ctx, *wait); err != nil {
			return err
		}
	}
	logger.Info("Simulator started", "api_url", *apiURL, "error_rate", errorRate, "max_pause", maxPause, "rides", *n)
	tally := sim.Run(ctx)
	logger.Info("Simulator stopped", "sent", tally.Sent, "succeeded", tally.Succeeded,
		"simulated_failures", tally.SimulatedFailures, "failed", tally.Failed, "gave_up", tally.GaveUp)
	if *n > 0 && tally.Failed+tally.GaveUp > 0 {
		return fmt.Errorf("%d of %d rides failed or gave up", tally.Failed+tally.GaveUp, tally.Sent)
	}
	return nil
}
