// Command worker works River's default queue: it mails ride receipts.
//
// Receipts go to the SMTP server at SMTP_URL when it is set, otherwise
// into MAIL_DIR as .eml files. With -once it works the jobs available now,
// prints "worked=N" and exits. Otherwise it runs until SIGINT or SIGTERM,
// letting jobs in progress finish first.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/platform/mail"
	"github.com/rocketrides/rocketrides/internal/platform/metrics"
	"github.com/rocketrides/rocketrides/internal/platform/project"
	"github.com/rocketrides/rocketrides/internal/receipt"
)

func main() {
	once := flag.Bool("once", false, "work the jobs available now, print worked=N and exit")
	flag.Parse()
	if err := run(*once); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run(once bool) error {
	logger, err := config.Logger("worker")
	if err != nil {
		return err
	}
	var env config.Env
	databaseURL := env.Required("DATABASE_URL")
	shutdownTimeout := env.Duration("WORKER_SHUTDOWN_TIMEOUT", 30*time.Second)
	onceTimeout := env.Duration("WORKER_ONCE_TIMEOUT", 30*time.Second)
	metricsAddr := env.String("METRICS_ADDR", "")
	if err := env.Err(); err != nil {
		return err
	}
	mailer, err := newMailer(&env, logger)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	pool, err := db.Open(ctx, databaseURL, 0)
	if err != nil {
		return err
	}
	defer pool.Close()

	client, err := receipt.NewClient(&receipt.ClientConfig{Pool: pool, Mailer: mailer, Logger: logger})
	if err != nil {
		return err
	}

	if once {
		onceCtx, cancel := context.WithTimeout(ctx, onceTimeout)
		defer cancel()
		worked, err := receipt.WorkAvailable(onceCtx, client)
		if err != nil {
			return err
		}
		fmt.Printf("worked=%d\n", worked)
		return nil
	}

	reg := metrics.NewRegistry()
	metrics.RegisterPool(reg, pool)
	metrics.WatchJobs(reg, client)
	if err := metrics.Serve(ctx, metricsAddr, reg, logger); err != nil {
		return err
	}

	// Cancelling the context given to Start would cancel the jobs in
	// progress; a signal asks for a soft stop instead, below.
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start river client: %w", err)
	}
	logger.Info("Worker started")
	<-ctx.Done()

	logger.Info("Stopping: letting jobs in progress finish", "timeout", shutdownTimeout)
	softCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := client.Stop(softCtx); err != nil {
		if !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("stop river client: %w", err)
		}
		// A cancelled job is retried later; a receipt that was already
		// sent is found in ride_receipts and not sent again.
		logger.Warn("Jobs still running after the shutdown timeout; cancelling them")
		hardCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := client.StopAndCancel(hardCtx); err != nil {
			return fmt.Errorf("stop river client: %w", err)
		}
	}
	logger.Info("Worker stopped")
	return nil
}

// newMailer sends through SMTP_URL when it is set and otherwise writes
// .eml files into MAIL_DIR.
func newMailer(env *config.Env, logger *slog.Logger) (mail.Mailer, error) {
	from := env.String("RECEIPT_FROM", receipt.DefaultFrom)
	if smtpURL := env.String("SMTP_URL", ""); smtpURL != "" {
		mailer, err := mail.NewSMTP(&mail.SMTPConfig{URL: smtpURL, From: from})
		if err != nil {
			return nil, fmt.Errorf("SMTP_URL: %w", err)
		}
		logger.Info("Mailing receipts via SMTP")
		return mailer, nil
	}
	dir := env.String("MAIL_DIR", "")
	if dir == "" {
		// The same .data/mail wherever in the checkout the worker is
		// started; outside a checkout, the working directory's.
		root, err := project.Root()
		if err != nil {
			root = "."
		}
		dir = filepath.Join(root, ".data", "mail")
	}
	mailer, err := mail.NewDir(&mail.DirConfig{Dir: dir, From: from})
	if err != nil {
		return nil, fmt.Errorf("MAIL_DIR: %w", err)
	}
	logger.Info("Writing receipts as .eml files; set SMTP_URL to send them", "mail_dir", dir)
	return mailer, nil
}
