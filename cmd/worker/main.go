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
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/rocketrides/rocketrides/internal/jobs"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/mail"
	"github.com/rocketrides/rocketrides/internal/platform/metrics"
	"github.com/rocketrides/rocketrides/internal/platform/process"
	"github.com/rocketrides/rocketrides/internal/platform/project"
)

const (
	// defaultShutdownTimeout (WORKER_SHUTDOWN_TIMEOUT) is how long a
	// stopping worker lets the jobs in progress finish before it cancels
	// them: a receipt waiting on a slow mail server gets the time to go
	// out rather than being sent again later.
	defaultShutdownTimeout = 30 * time.Second

	// defaultJobTimeout (WORKER_JOB_TIMEOUT) bounds one attempt at a
	// receipt, and defaultRescueStuckAfter (WORKER_RESCUE_STUCK_AFTER) is
	// when a job left running by a worker that lost its database (a
	// failover) is tried again, instead of River's default hour.
	defaultJobTimeout       = time.Minute
	defaultRescueStuckAfter = 5 * time.Minute

	// defaultOnceTimeout (WORKER_ONCE_TIMEOUT) bounds -once, so that a
	// script waiting for it is not held up by a mail server that hangs.
	defaultOnceTimeout = 30 * time.Second

	// hardStopTimeout bounds the wait for cancelled jobs to return.
	hardStopTimeout = 10 * time.Second
)

func main() { process.Main(command()) }

// command is the process, for main and its tests.
func command() *process.Config {
	return &process.Config{
		Name:      "worker",
		OnceUsage: "work the jobs available now, print worked=N and exit",
		Build:     build,
	}
}

func build(ctx context.Context, env *config.Env, logger *slog.Logger) (*process.Program, error) {
	databaseURL := env.Required("DATABASE_URL")
	// Zero is refused for both: a shutdown that may not wait cancels every
	// receipt in hand (a short timeout says so on purpose), and a -once
	// that may not run works nothing.
	shutdownTimeout := env.Duration("WORKER_SHUTDOWN_TIMEOUT", defaultShutdownTimeout)
	onceTimeout := env.Duration("WORKER_ONCE_TIMEOUT", defaultOnceTimeout)
	jobTimeout := env.Duration("WORKER_JOB_TIMEOUT", defaultJobTimeout)
	rescueAfter := env.Duration("WORKER_RESCUE_STUCK_AFTER", defaultRescueStuckAfter)
	from := env.String("RECEIPT_FROM", jobs.DefaultReceiptFrom)
	smtpURL := env.String("SMTP_URL", "")
	mailDir := env.String("MAIL_DIR", "")
	metricsAddr := env.String("METRICS_ADDR", "")
	if err := env.Err(); err != nil {
		return nil, err
	}
	if rescueAfter <= jobTimeout {
		return nil, fmt.Errorf("WORKER_RESCUE_STUCK_AFTER=%s: must exceed WORKER_JOB_TIMEOUT (%s)", rescueAfter, jobTimeout)
	}
	mailer, err := newMailer(ctx, logger, smtpURL, mailDir, from)
	if err != nil {
		return nil, err
	}

	pool, reg, err := process.OpenDatabase(ctx, databaseURL)
	if err != nil {
		return nil, err
	}
	client, err := jobs.NewClient(&jobs.ClientConfig{
		Pool: pool, Mailer: mailer, Logger: logger, JobTimeout: jobTimeout, RescueStuckJobsAfter: rescueAfter,
	})
	if err != nil {
		return nil, err
	}
	metrics.WatchJobs(reg, client)

	return &process.Program{
		Run: func(ctx context.Context) error {
			return run(ctx, client, shutdownTimeout, logger)
		},
		Once: func(ctx context.Context) (string, error) {
			ctx, cancel := context.WithTimeout(ctx, onceTimeout)
			defer cancel()
			worked, err := jobs.WorkAvailable(ctx, client)
			return fmt.Sprintf("worked=%d", worked), err
		},
		Metrics:     reg,
		MetricsAddr: metricsAddr,
		Settings: []slog.Attr{
			slog.Int("max_workers", jobs.DefaultMaxWorkers),
		},
		Close: pool.Close,
	}, nil
}

// run works jobs until ctx ends, then lets the jobs in progress finish
// for up to shutdownTimeout before cancelling them.
func run(ctx context.Context, client *river.Client[pgx.Tx], shutdownTimeout time.Duration, logger *slog.Logger) error {
	// Cancelling the context given to Start would cancel the jobs in
	// progress; a signal asks for a soft stop instead, below.
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start river client: %w", err)
	}
	<-ctx.Done()

	logger.InfoContext(ctx, "Stopping: letting jobs in progress finish",
		slog.Duration("shutdown_timeout", shutdownTimeout))
	softCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	err := client.Stop(softCtx)
	if err == nil {
		return nil
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("stop river client: %w", err)
	}
	// A cancelled job is retried later; a receipt that was already sent
	// is found in ride_receipts and not sent again.
	logger.WarnContext(ctx, "Jobs still running after the shutdown timeout; cancelling them",
		slog.Duration("shutdown_timeout", shutdownTimeout))
	hardCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hardStopTimeout)
	defer cancel()
	if err := client.StopAndCancel(hardCtx); err != nil {
		return fmt.Errorf("stop river client: %w", err)
	}
	return nil
}

// newMailer sends through smtpURL when it is set and otherwise writes
// .eml files into mailDir.
func newMailer(ctx context.Context, logger *slog.Logger, smtpURL, mailDir, from string) (mail.Mailer, error) {
	if smtpURL != "" {
		mailer, err := mail.NewSMTP(&mail.SMTPConfig{URL: smtpURL, From: from})
		if err != nil {
			return nil, fmt.Errorf("SMTP_URL: %w", err)
		}
		// Not the URL: it may hold a password.
		logger.InfoContext(ctx, "Mailing receipts via SMTP")
		return mailer, nil
	}
	if mailDir == "" {
		// The same .data/mail wherever in the checkout the worker is
		// started; outside a checkout, the working directory's.
		root, err := project.Root()
		if err != nil {
			root = "."
		}
		mailDir = filepath.Join(root, ".data", "mail")
	}
	mailer, err := mail.NewDir(&mail.DirConfig{Dir: mailDir, From: from})
	if err != nil {
		return nil, fmt.Errorf("MAIL_DIR: %w", err)
	}
	logger.InfoContext(ctx, "Writing receipts as .eml files; set SMTP_URL to send them",
		slog.String("mail_dir", mailDir))
	return mailer, nil
}
