// Command api serves the Rocket Rides HTTP API until SIGINT or SIGTERM,
// then lets the requests in flight finish.
package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"runtime/debug"
	"strconv"

	"github.com/rocketrides/rocketrides/internal/api"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/platform/failpoint"
	"github.com/rocketrides/rocketrides/internal/platform/metrics"
	"github.com/rocketrides/rocketrides/internal/platform/problem"
	"github.com/rocketrides/rocketrides/internal/platform/process"
	"github.com/rocketrides/rocketrides/internal/platform/serve"
	"github.com/rocketrides/rocketrides/internal/ratelimit"
	"github.com/rocketrides/rocketrides/internal/rides"
)

func main() { process.Main(command()) }

// command is the process, for main and its tests.
func command() *process.Config {
	return &process.Config{Name: "api", Build: build}
}

func build(ctx context.Context, env *config.Env, logger *slog.Logger) (*process.Program, error) {
	databaseURL := env.Required("DATABASE_URL")
	settings := rides.SettingsFromEnv(env)
	tokenLimit, failedAuthLimit := ratelimit.EdgeFromEnv(env)
	simulatedErrors := env.Bool("SIMULATED_ERRORS", false)
	// Zero keeps pgx's default pool size.
	maxConns := env.Int32OrZero("DATABASE_MAX_CONNS", 0)
	// Loopback unless told otherwise: a container, or a host behind a
	// load balancer, sets HOST=0.0.0.0.
	host := env.Host("HOST", "127.0.0.1")
	// Zero listens on any free port; the "Serving HTTP" line says which.
	port := env.Port("PORT", 5000)
	// /metrics is unauthenticated, so it is never on the public port: it
	// is served here, an address for operators, and not at all when unset.
	metricsAddr := env.String("METRICS_ADDR", "")
	debugAddr := env.String("DEBUG_ADDR", "")
	// Go reads GOGC itself at start; reading it here too gives the api
	// its own default and puts the value on the start line.
	gcPercent, gcErr := api.GCPercent(env.String("GOGC", api.DefaultGCPercent))
	typeBase := problem.ReadTypeBase(env)
	if err := errors.Join(env.Err(), gcErr); err != nil {
		return nil, err
	}
	problem.SetTypeBase(typeBase)

	debug.SetGCPercent(gcPercent)

	pool, err := db.Open(ctx, databaseURL, maxConns)
	if err != nil {
		return nil, err
	}
	// Served at GET /metrics on METRICS_ADDR.
	reg := metrics.NewRegistry()
	svc, _, err := settings.NewService(ctx, pool, reg, logger)
	if err != nil {
		pool.Close()
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
	limits, err := ratelimit.New(&ratelimit.Config{Pool: pool, Token: tokenLimit, FailedAuth: failedAuthLimit, Logger: logger})
	if err != nil {
		return nil, err
	}
	handler, err := api.New(&api.Config{
		Pool:     pool,
		Logger:   logger,
		Registry: reg,
		Rides:    ridesHandler,
		Limits:   limits,
	})
	if err != nil {
		return nil, err
	}
	// The api sweeps the rate limits' ended windows, the charge cap's
	// included, whenever any limit is on.
	sweeper, err := ratelimit.Sweeper(pool, logger)
	if err != nil {
		return nil, err
	}
	if err := api.ServeDebug(ctx, debugAddr, logger); err != nil {
		return nil, err
	}
	srv, err := serve.Listen(api.ServerConfig(net.JoinHostPort(host, strconv.Itoa(port)), handler, logger))
	if err != nil {
		return nil, err
	}

	run := srv.Serve
	if limits.On() || settings.Charges.On() {
		run = func(ctx context.Context) error {
			ctx, stop := context.WithCancel(ctx)
			swept := make(chan struct{})
			go func() {
				defer close(swept)
				_ = sweeper.Run(ctx)
			}()
			err := srv.Serve(ctx)
			stop()
			<-swept
			return err
		}
	}

	return &process.Program{
		Run:         run,
		Metrics:     reg,
		MetricsAddr: metricsAddr,
		Close:       pool.Close,
	}, nil
}
