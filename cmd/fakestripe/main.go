// Command fakestripe serves the local Stripe fake (internal/dev/fakestripe) so
// that the API and worker processes, and black-box tests, can charge cards
// without a network or a Stripe account. Point a stripe-go client at it with
// STRIPE_API_BASE=http://localhost:12111 and any sk_test_ key.
//
// Settings, from the environment:
//
//	HOST                       host to listen on (default 127.0.0.1: the fake
//	                           answers anyone who reaches it, faults included)
//	PORT                       port to listen on (default 12111; 0: any free port)
//	FAKESTRIPE_KEY_RETENTION   how long idempotency keys are remembered, a Go
//	                           duration such as 24h or 90s (default 24h)
//	FAKESTRIPE_STATE           a file that keeps customers, charges and
//	                           idempotency keys across restarts (make dev sets
//	                           .data/fakestripe/state.jsonl); unset: in memory,
//	                           gone when it stops
//	LOG_LEVEL, LOG_FORMAT      as for every process (see internal/platform/config)
package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/process"
	"github.com/rocketrides/rocketrides/internal/platform/serve"
	"github.com/rocketrides/rocketrides/internal/platform/trace"
)

func main() { process.Main(command()) }

// command is the process, for main and its tests.
func command() *process.Config {
	return &process.Config{Name: "fakestripe", Build: build}
}

func build(_ context.Context, env *config.Env, logger *slog.Logger) (*process.Program, error) {
	keyRetention := env.Duration("FAKESTRIPE_KEY_RETENTION", fakestripe.DefaultKeyRetention)
	// Loopback unless told otherwise: /_fake/faults and the customer list
	// answer anyone with any sk_ key. A container sets HOST=0.0.0.0.
	host := env.Host("HOST", "127.0.0.1")
	// Zero listens on any free port; the "Serving HTTP" line says which.
	port := env.Port("PORT", 12111)
	// Postgres keeps the rides across a restart of make dev; the charges
	// they record must survive it too, or the reconciler reports every
	// one of them missing.
	statePath := env.String("FAKESTRIPE_STATE", "")
	if err := env.Err(); err != nil {
		return nil, err
	}

	fake, err := fakestripe.New(&fakestripe.Config{KeyRetention: keyRetention, Logger: logger, StatePath: statePath})
	if err != nil {
		return nil, err
	}
	srv, err := serve.Listen(&serve.Config{
		Name: "fakestripe",
		Addr: net.JoinHostPort(host, strconv.Itoa(port)),
		// Traced like the api (OTEL_*): a charge's span at the fake is
		// the child of the api's call, how long "Stripe" took seen
		// from Stripe's side.
		Handler: trace.Handler(fake),
		Logger:  logger,
		// Requests in flight (a charge sleeping out injected latency,
		// say) get this long to finish once asked to stop.
		ShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		return nil, errors.Join(err, fake.Close())
	}
	return &process.Program{
		Run: srv.Serve,
		// After Serve: requests in flight have finished.
		Close: func() {
			if err := fake.Close(); err != nil {
				logger.ErrorContext(context.Background(), "Close state file", slog.Any("error", err))
			}
		},
	}, nil
}
