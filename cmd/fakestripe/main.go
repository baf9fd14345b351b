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
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/platform/config"
)

// shutdownTimeout bounds how long in-flight requests (a charge sleeping
// out injected latency, say) may take to finish once asked to stop.
const shutdownTimeout = 10 * time.Second

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

	srv := &http.Server{
		Handler:           fakestripe.New(fakestripe.Options{KeyRetention: keyRetention, Logger: logger}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	logger.Info("listening", "addr", ln.Addr().String(), "key_retention", keyRetention)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}

	logger.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	logger.Info("stopped")
	return nil
}
