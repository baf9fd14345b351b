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
//	LOG_LEVEL, LOG_FORMAT      as for every process (see internal/platform/config)
//
// Its state lives in memory and is gone when it stops.
package main

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/process"
	"github.com/rocketrides/rocketrides/internal/platform/serve"
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
	if err := env.Err(); err != nil {
		return nil, err
	}

	fake, err := fakestripe.New(&fakestripe.Config{KeyRetention: keyRetention, Logger: logger})
	if err != nil {
		return nil, err
	}
	srv, err := serve.Listen(&serve.Config{
		Name:    "fakestripe",
		Addr:    net.JoinHostPort(host, strconv.Itoa(port)),
		Handler: fake,
		Logger:  logger,
		// Requests in flight (a charge sleeping out injected latency,
		// say) get this long to finish once asked to stop.
		ShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	return &process.Program{
		Run: srv.Serve,
	}, nil
}
