// Command reconciler compares Stripe's charges with the rides table and
// reports charges no ride accounts for, rides whose charge Stripe does not
// have, rides and charges that disagree, and double charges. It never
// changes anything.
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
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/reconcile"
)

// errDiscrepancies ends a -once run that found something.
var errDiscrepancies = errors.New("discrepancies found")

func main() {
	once := flag.Bool("once", false, "reconcile once, print the report and exit 1 on any discrepancy")
	since := flag.Duration("since", 0, "look back this far (default $RECONCILER_WINDOW, or 24h)")
	flag.Parse()
	err := run(*once, *since)
	switch {
	case errors.Is(err, errDiscrepancies):
		os.Exit(1)
	case err != nil:
		fmt.Fprintln(os.Stderr, "reconciler:", err)
		os.Exit(2)
	}
}

func run(once bool, since time.Duration) error {
	logger, err := config.Logger("reconciler")
	if err != nil {
		return err
	}
	var env config.Env
	databaseURL := env.Required("DATABASE_URL")
	stripe := payment.ConfigFromEnv(&env)
	window := env.PositiveDuration("RECONCILER_WINDOW", reconcile.DefaultWindow)
	if since > 0 {
		window = since
	}
	interval := env.PositiveDuration("RECONCILER_INTERVAL", reconcile.DefaultInterval)
	grace := env.PositiveDuration("RECONCILER_GRACE", reconcile.DefaultGrace)
	if err := env.Err(); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	pool, err := db.Open(ctx, databaseURL, 0)
	if err != nil {
		return err
	}
	defer pool.Close()

	payments, err := payment.New(&stripe)
	if err != nil {
		return err
	}
	reconciler, err := reconcile.New(&reconcile.Config{
		Pool:     pool,
		Payments: payments,
		Window:   window,
		Interval: interval,
		Grace:    grace,
		Logger:   logger,
	})
	if err != nil {
		return err
	}

	if once {
		rep, err := reconciler.RunOnce(ctx)
		if err != nil {
			return err
		}
		fmt.Println(rep)
		for _, d := range rep.Discrepancies {
			fmt.Println(d)
		}
		if !rep.OK() {
			return errDiscrepancies
		}
		return nil
	}

	logger.Info("Reconciler started", "window", window, "interval", interval, "grace", grace,
		"stripe_api_base", stripe.BaseURL)
	if err := reconciler.Run(ctx); err != nil {
		return err
	}
	logger.Info("Reconciler stopped")
	return nil
}
