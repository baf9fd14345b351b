// Package process is the one shape of a command's main. A command names
// itself and hands Main a Build function that reads its settings and
// builds what it runs; Main does the rest the same way for every process:
// the logger, the flags, SIGINT and SIGTERM, the metrics listener, the
// started and stopped lines, and the exit status.
//
// A background process also gets -once: one pass (a batch completed, a
// backlog reaped, a reconciliation), its summary printed as one line on
// stdout, and exit. That is how scripts, tests and cron use it.
//
//	func main() {
//		process.Main(&process.Config{
//			Name:      "reaper",
//			OnceUsage: "reap everything due, print reaped=N abandoned=M and exit",
//			Build:     build,
//		})
//	}
package process

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/metrics"
)

// Config describes a command.
type Config struct {
	// Name is the command's name: the process attribute of its log lines
	// and the prefix of its error message. Required.
	Name string

	// OnceUsage, when set, gives the command a -once flag with this
	// usage text: Program.Once runs instead of Program.Run.
	OnceUsage string

	// Build reads the process's settings (config.Env), then opens and
	// builds what it runs. ctx ends on SIGINT or SIGTERM. On an error
	// the process exits at once, so Build need not close what it opened.
	// Required.
	Build func(ctx context.Context, logger *slog.Logger) (*Program, error)

	// FailureCode is the exit status after an error. Defaults to 1.
	FailureCode int
}

// Program is a built process, ready to run.
type Program struct {
	// Run runs the process until ctx ends (SIGINT or SIGTERM), stops it
	// gracefully and returns nil. Required.
	Run func(ctx context.Context) error

	// Once does one pass and returns its summary, printed on stdout, such
	// as "reaped=12 abandoned=1". Required with Config.OnceUsage.
	Once func(ctx context.Context) (summary string, err error)

	// Metrics, when MetricsAddr is set too (METRICS_ADDR), are served at
	// http://MetricsAddr/metrics while Run runs.
	Metrics     prometheus.Gatherer
	MetricsAddr string

	// Settings are the settings in effect, logged on the "Started" line.
	Settings []slog.Attr

	// Close releases what Build opened (the database pool) once Run or
	// Once has returned. Optional.
	Close func()
}

// ExitCode ends a process with its value and no error message. A Once
// that found something to report (the reconciler's discrepancies) returns
// its summary with ExitCode(1).
type ExitCode int

func (c ExitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }

// Main runs the command described by config, then exits.
func Main(config *Config) {
	os.Exit(run(context.Background(), config, flag.CommandLine, os.Args[1:], os.Stdout, os.Stderr))
}

// run is Main, returning the exit status.
func run(ctx context.Context, cfg *Config, flags *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	var once bool
	if cfg.OnceUsage != "" {
		flags.BoolVar(&once, "once", false, cfg.OnceUsage)
	}
	if err := flags.Parse(args); err != nil {
		return 2 // the flag package has printed the error and the usage
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", cfg.Name, flags.Args())
		return 2
	}

	err := start(ctx, cfg, once, stdout)
	var code ExitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	}
	fmt.Fprintf(stderr, "%s: %v\n", cfg.Name, err)
	if cfg.FailureCode != 0 {
		return cfg.FailureCode
	}
	return 1
}

func (c *Config) validate() error {
	switch {
	case c == nil:
		return errors.New("process: Config is required")
	case c.Name == "":
		return errors.New("process: Config.Name is required")
	case c.Build == nil:
		return fmt.Errorf("%s: process: Config.Build is required", c.Name)
	case c.FailureCode < 0:
		return fmt.Errorf("%s: process: Config.FailureCode must not be negative, got %d", c.Name, c.FailureCode)
	}
	return nil
}

// start builds the process and runs it once or until a signal.
func start(ctx context.Context, cfg *Config, once bool, stdout io.Writer) error {
	logger, err := config.Logger(cfg.Name)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	program, err := cfg.Build(ctx, logger)
	if err != nil {
		return err
	}
	if program.Close != nil {
		defer program.Close()
	}
	switch {
	case program.Run == nil:
		return fmt.Errorf("process: Program.Run is required")
	case once && program.Once == nil:
		return fmt.Errorf("process: Program.Once is required with -once")
	}

	if once {
		summary, err := program.Once(ctx)
		var code ExitCode
		if err != nil && !errors.As(err, &code) {
			return err
		}
		fmt.Fprintln(stdout, summary)
		return err
	}

	if program.Metrics != nil {
		if err := metrics.Serve(ctx, program.MetricsAddr, program.Metrics, logger); err != nil {
			return err
		}
	}
	logger.LogAttrs(ctx, slog.LevelInfo, "Started", program.Settings...)
	if err := program.Run(ctx); err != nil {
		return err
	}
	logger.InfoContext(ctx, "Stopped")
	return nil
}
