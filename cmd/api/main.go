// Command api serves the Rocket Rides HTTP API until SIGINT or SIGTERM,
// then lets the requests in flight finish.
package main

import (
	"context"
	"log/slog"
	"strconv"

	"github.com/rocketrides/rocketrides/internal/api"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/platform/failpoint"
	"github.com/rocketrides/rocketrides/internal/platform/metrics"
	"github.com/rocketrides/rocketrides/internal/platform/process"
	"github.com/rocketrides/rocketrides/internal/platform/serve"
	"github.com/rocketrides/rocketrides/internal/rides"
)

func main() {
	process.Main(&process.Config{Name: "api", Build: build})
}

func build(ctx context.Context, logger *slog.Logger) (*process.Program, error) {
	var env config.Env
	databaseURL := env.Required("DATABASE_URL")
	settings := rides.SettingsFromEnv(&env)
	simulatedErrors := env.Bool("SIMULATED_ERRORS", false)
	// Zero keeps pgx's default pool size.
	maxConns := env.IntOrZero("DATABASE_MAX_CONNS", 0)
	// Zero listens on any free port; the "Serving HTTP" line says which.
	port := env.Port("PORT", 5000)
	debugAddr := env.String("DEBUG_ADDR", "")
	if err := env.Err(); err != nil {
		return nil, err
	}

	pool, err := db.Open(ctx, databaseURL, int32(maxConns))
	if err != nil {
		return nil, err
	}
	// Served at GET /metrics on the API's own port.
	reg := metrics.NewRegistry()
	svc, _, err := settings.NewService(pool, reg, logger)
	if err != nil {
		return nil, err
	}
	ridesHandler, err := rides.NewHandler(&rides.HandlerConfig{
		Service:         svc,
		Pool:            pool,
		Logger:          logger,
		SimulatedErrors: simulatedErrors,
		Failpoint:       failpoint.FromEnv(),
	})
	if err != nil {
		return nil, err
	}
	handler, err := api.New(&api.Config{
		Pool:     pool,
		Logger:   logger,
		Registry: reg,
		Rides:    ridesHandler,
	})
	if err != nil {
		return nil, err
	}
	if err := api.ServeDebug(ctx, debugAddr, logger); err != nil {
		return nil, err
	}
	srv, err := serve.Listen(api.ServerConfig(":"+strconv.Itoa(port), handler, logger))
	if err != nil {
		return nil, err
	}

	return &process.Program{
		Run: srv.Serve,
		Settings: []slog.Attr{
			slog.String("stripe_api_base", settings.Stripe.BaseURL),
			slog.Bool("simulated_errors", simulatedErrors),
			slog.Duration("lock_timeout", settings.LockTimeout),
			slog.Int("max_charge_attempts", settings.MaxChargeAttempts),
		},
		Close: pool.Close,
	}, nil
}
