// Command fakestripe serves the local Stripe fake (internal/dev/fakestripe) so
// that the API and worker processes, and black-box tests, can charge cards
// without a network or a Stripe account. Point a stripe-go client at it with
// STRIPE_API_BASE=http://localhost:12111 and any sk_test_ key.
//
// Settings, from the environment:
//
//	PORT                       port to listen on (default 12111)
//	FAKESTRIPE_KEY_RETENTION   how long idempotency keys are remembered, a Go
//	                           duration such as 24h or 90s (default 24h)
//	LOG_LEVEL, LOG_FORMAT      as for every process (see internal/platform/config)
//
// Its state lives in memory and is gone when it stops.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/serve"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fakestripe:", err)
		os.Exit(1)
	}
}

func run() error {
	logger, err := config.Logger("fakestripe")
	if err != nil {
		return err
	}
	var env config.Env
	keyRetention := env.Duration("FAKESTRIPE_KEY_RETENTION", fakestripe.DefaultKeyRetention)
	addr := ":" + strconv.Itoa(env.Port("PORT", 12111))
	if err := env.Err(); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	fake, err := fakestripe.New(&fakestripe.Config{KeyRetention: keyRetention, Logger: logger})
	if err != nil {
		return err
	}
	srv, err := serve.Listen(&serve.Config{
		Name:    "fakestripe",
		Addr:    addr,
		Handler: fake,
		Logger:  logger,
		// In-flight requests (a charge sleeping out injected latency,
		// say) get this long to finish once asked to stop.
		ShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		return err
	}
	logger.InfoContext(ctx, "Stripe fake started", slog.Duration("key_retention", keyRetention))
	return srv.Serve(ctx)
}
