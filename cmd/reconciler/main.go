// Command reconciler compares Stripe's charges with the rides table and
// reports charges no ride accounts for, rides whose charge Stripe does not
// have, rides and charges that disagree, and double charges. It changes
// two things only: a paid ride whose request the database lost is restored
// from its charge, its key claimed on the api's IDEMPOTENCY_LOCK_TIMEOUT,
// and a recorded charge gets its ride's id in its metadata.
//
// With -once it runs one reconciliation, prints the summary line and then
// each discrepancy on a line of its own, and exits 1 if there was any
// discrepancy, 0 if there was none, and 2 if the comparison could not be
// made. Otherwise it runs every RECONCILER_INTERVAL, logging each
// discrepancy at ERROR, until SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/problem"
	"github.com/rocketrides/rocketrides/internal/platform/process"
	"github.com/rocketrides/rocketrides/internal/reconcile"
	"github.com/rocketrides/rocketrides/internal/rides"
)

// since is -since.
var since time.Duration

func main() { process.Main(command()) }

// command is the process, for main and its tests.
func command() *process.Config {
	return &process.Config{
		Name:      "reconciler",
		OnceUsage: "reconcile once, print the report and exit 1 on any discrepancy",
		Build:     build,
		Flags: func(flags *flag.FlagSet) {
			flags.DurationVar(&since, "since", 0, "look back this far (default $RECONCILER_WINDOW)")
		},
		// 1 is a finding, not a failure.
		FailureCode: 2,
	}
}

func build(ctx context.Context, env *config.Env, logger *slog.Logger) (*process.Program, error) {
	databaseURL := env.Required("DATABASE_URL")
	stripe := payment.ConfigFromEnv(env)
	// A restored ride's key is claimed as the api claims one, on the same
	// lock timeout.
	lockTimeout := idem.LockTimeoutFromEnv(env)
	payment.RefuseTimeoutPastLock(env, stripe, lockTimeout)
	window := env.Duration("RECONCILER_WINDOW", reconcile.DefaultWindow)
	interval := env.Duration("RECONCILER_INTERVAL", reconcile.DefaultInterval)
	grace := env.Duration("RECONCILER_GRACE", reconcile.DefaultGrace)
	metricsAddr := env.String("METRICS_ADDR", "")
	// A ride it restores may store a problem on its key.
	typeBase := problem.ReadTypeBase(env)
	if err := env.Err(); err != nil {
		return nil, err
	}
	problem.SetTypeBase(typeBase)
	switch {
	case since < 0:
		return nil, errors.New("-since must not be negative")
	case since > 0:
		window = since
	}

	pool, reg, err := process.OpenDatabase(ctx, databaseURL)
	if err != nil {
		return nil, err
	}
	payments, err := payment.New(&stripe)
	if err != nil {
		return nil, err
	}
	keys, err := idem.New(&idem.Config{Pool: pool, LockTimeout: lockTimeout, Actor: "reconciler", Logger: logger})
	if err != nil {
		return nil, err
	}
	service, err := rides.NewService(&rides.ServiceConfig{Pool: pool, Keys: keys, Payments: payments, Logger: logger})
	if err != nil {
		return nil, err
	}
	reconciler, err := reconcile.New(&reconcile.Config{
		Pool:     pool,
		Payments: payments,
		Rides:    service,
		Window:   window,
		Interval: interval,
		Grace:    grace,
		Logger:   logger,
	})
	if err != nil {
		return nil, err
	}

	return &process.Program{
		Run: reconciler.Run,
		Once: func(ctx context.Context) (string, error) {
			rep, err := reconciler.RunOnce(ctx)
			if err != nil {
				return "", err
			}
			if err := reconciler.Record(ctx, rep); err != nil {
				return "", err
			}
			lines := []string{rep.String()}
			for _, rs := range rep.Restored {
				lines = append(lines, fmt.Sprintf("restored charge=%s ride=%d: the database had lost its request", rs.ChargeID, rs.RideID))
			}
			for _, d := range rep.Discrepancies {
				lines = append(lines, d.String())
			}
			if !rep.OK() {
				return strings.Join(lines, "\n"), process.ExitCode(1)
			}
			return strings.Join(lines, "\n"), nil
		},
		Metrics:     reg,
		MetricsAddr: metricsAddr,
		Settings: []slog.Attr{
			// -since wins over RECONCILER_WINDOW.
			slog.Duration("window", window),
		},
		Close: pool.Close,
	}, nil
}
