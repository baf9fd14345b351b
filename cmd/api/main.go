// Command api serves the Rocket Rides HTTP API.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/rocketrides/rocketrides/internal/api"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/platform/failpoint"
	"github.com/rocketrides/rocketrides/internal/platform/metrics"
	"github.com/rocketrides/rocketrides/internal/platform/serve"
	"github.com/rocketrides/rocketrides/internal/rides"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		os.Exit(1)
	}
}

func run() error {
	logger, err := config.Logger("api")
	if err != nil {
		return err
	}
	var env config.Env
	databaseURL := env.Required("DATABASE_URL")
	settings := rides.SettingsFromEnv(&env)
	simulatedErrors := env.Bool("SIMULATED_ERRORS", false)
	// Zero keeps pgx's default pool size.
	maxConns := env.IntOrZero("DATABASE_MAX_CONNS", 0)
	addr := ":" + strconv.Itoa(env.Port("PORT", 5000))
	debugAddr := env.String("DEBUG_ADDR", "")
	if err := env.Err(); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	pool, err := db.Open(ctx, databaseURL, int32(maxConns))
	if err != nil {
		return err
	}
	defer pool.Close()

	reg := metrics.NewRegistry()
	svc, _, err := settings.NewService(pool, reg, logger)
	if err != nil {
		return err
	}
	handler, err := api.New(&api.Config{
		Pool:     pool,
		Logger:   logger,
		Registry: reg,
		Rides: rides.NewHandler(rides.HandlerConfig{
			Service:         svc,
			Pool:            pool,
			Logger:          logger,
			SimulatedErrors: simulatedErrors,
			Failpoint:       failpoint.FromEnv(),
		}),
	})
	if err != nil {
		return err
	}

	if err := api.ServeDebug(ctx, debugAddr, logger); err != nil {
		return err
	}
	srv, err := serve.Listen(api.ServerConfig(addr, handler, logger))
	if err != nil {
		return err
	}
	logger.InfoContext(ctx, "API started",
		slog.String("stripe_api_base", settings.Stripe.BaseURL),
		slog.Bool("simulated_errors", simulatedErrors),
		slog.Duration("lock_timeout", settings.LockTimeout))
	return srv.Serve(ctx)
}
