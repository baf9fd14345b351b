// Package process is the one shape of a command's main. A command names
// itself and hands Main a Build function that reads its settings and
// builds what it runs; Main does the rest the same way for every process:
// the logger, the flags, SIGINT and SIGTERM, the metrics listener, the
// started and stopped lines, and the exit status.
//
// Main also makes every process explain its settings the same way. Build
// reads them through the config.Env that Main hands it, so Main knows
// exactly what the process reads: -help runs Build with config.Describe
// (every setting at its default, nothing opened) and lists each setting
// with its type, default and what it changes; -settings prints the same
// as JSON (docs/configuration.md is generated from it). At start, a
// variable with one of the project's prefixes that no process defines
// stops the process, naming the nearest known name, and the "Started"
// line logs every setting in effect, secrets redacted.
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
//
//	func build(ctx context.Context, env *config.Env, logger *slog.Logger) (*process.Program, error) {
//		maxAge := env.Duration("REAPER_MAX_AGE", reaper.DefaultMaxAge)
//		...
//		if err := env.Err(); err != nil {
//			return nil, err // here, too, under -help: nothing is opened
//		}
//		...
//	}
package process

import (
	"context"
	"encoding/json"
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
	"github.com/rocketrides/rocketrides/internal/platform/trace"
)

// Config describes a command.
type Config struct {
	// Name is the command's name: the process attribute of its log lines
	// and the prefix of its error message. Required.
	Name string

	// OnceUsage, when set, gives the command a -once flag with this
	// usage text: Program.Once runs instead of Program.Run.
	OnceUsage string

	// Build reads the process's settings from env, returns env.Err() if
	// it is not nil, and only then opens and builds what it runs: run
	// with config.Describe for -help, it must stop at that check. Every
	// setting is read before it. ctx ends on SIGINT or SIGTERM. On an
	// error the process exits at once, so Build need not close what it
	// opened. Required.
	Build func(ctx context.Context, env *config.Env, logger *slog.Logger) (*Program, error)

	// Flags, when set, defines the command's own flags on flags, which
	// Main parses before Build runs. Optional.
	Flags func(flags *flag.FlagSet)

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

	// Settings are what the "Started" line says besides the settings read
	// from the environment, which it always lists: values from flags,
	// say. Optional.
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

// Run is Main without the exit, for tests: it runs the command described
// by config with args, with its own flags, writing its output and its log
// lines to stdout and stderr, and returns the exit status.
func Run(ctx context.Context, config *Config, args []string, stdout, stderr io.Writer) int {
	name := "process"
	if config != nil {
		name = config.Name
	}
	flags := flag.NewFlagSet(name, flag.ContinueOnError)
	flags.SetOutput(stderr)
	return run(ctx, config, flags, args, stdout, stderr)
}

// run is Main, returning the exit status.
func run(ctx context.Context, cfg *Config, flags *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	var once, settings bool
	if cfg.OnceUsage != "" {
		flags.BoolVar(&once, "once", false, cfg.OnceUsage)
	}
	flags.BoolVar(&settings, "settings", false, "print the settings this process reads, as JSON, and exit")
	if cfg.Flags != nil {
		cfg.Flags(flags)
	}
	flags.Usage = func() {
		out := flags.Output()
		fmt.Fprintf(out, "Usage of %s:\n", cfg.Name)
		flags.PrintDefaults()
		reads, err := Describe(ctx, cfg)
		if err != nil {
			fmt.Fprintf(out, "\n%s: %v\n", cfg.Name, err)
			return
		}
		fmt.Fprintf(out, "\nSettings, from the environment (an empty one takes its default; all of them: docs/configuration.md):\n")
		config.WriteHelp(out, reads)
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2 // the flag package has printed the error and the usage
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", cfg.Name, flags.Args())
		return 2
	}
	if settings {
		if err := writeSettings(ctx, cfg, stdout); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", cfg.Name, err)
			return 1
		}
		return 0
	}

	err := start(ctx, cfg, once, stdout, stderr)
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

// readCommon reads the settings Main reads for every process, before
// Build reads the process's own.
func readCommon(env *config.Env, name string, stderr io.Writer) (logger *slog.Logger, allowUnknown bool, tracing *trace.Config, err error) {
	logger, err = config.Logger(env, name, stderr)
	allowUnknown = env.Bool(config.AllowUnknown, false)
	tracing = trace.FromEnv(env, name)
	return logger, allowUnknown, tracing, err
}

// Describe runs the command's Build with config.Describe and returns the
// settings the process reads, in the order it reads them, each with the
// default its code passes: what -help lists.
func Describe(ctx context.Context, cfg *Config) ([]config.Read, error) {
	env := config.Describe()
	if _, _, _, err := readCommon(env, cfg.Name, io.Discard); err != nil {
		return nil, err
	}
	program, err := cfg.Build(ctx, env, slog.New(slog.DiscardHandler))
	if program != nil && program.Close != nil {
		program.Close()
	}
	switch {
	case errors.Is(err, config.ErrDescribed):
		return env.Reads(), nil
	case err != nil:
		return nil, err
	}
	return nil, errors.New("process: Build did not stop at env.Err() when asked to describe its settings")
}

// writeSettings writes what Describe returns as JSON, for
// docs/configuration.md's generator: the declaration of each setting and
// its default as shown.
func writeSettings(ctx context.Context, cfg *Config, w io.Writer) error {
	reads, err := Describe(ctx, cfg)
	if err != nil {
		return err
	}
	for i := range reads {
		reads[i].Default = reads[i].Show(reads[i].Default)
		reads[i].Value = ""
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(reads)
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
func start(ctx context.Context, cfg *Config, once bool, stdout, stderr io.Writer) error {
	env := &config.Env{}
	logger, allowUnknown, tracing, err := readCommon(env, cfg.Name, stderr)
	if err != nil {
		return err
	}
	if unknown := config.Unknown(os.Environ()); len(unknown) > 0 {
		if !allowUnknown {
			return errors.Join(unknown...)
		}
		for _, err := range unknown {
			logger.WarnContext(ctx, "Ignoring an unknown setting", slog.String("error", err.Error()))
		}
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Before Build, which installs the instrumentation only if it traces.
	stopTracing, err := trace.Setup(ctx, tracing)
	if err != nil {
		return err
	}
	defer func() {
		if err := stopTracing(context.WithoutCancel(ctx)); err != nil {
			logger.WarnContext(ctx, "Flushing traces failed", slog.Any("error", err))
		}
	}()

	program, err := cfg.Build(ctx, env, logger)
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
	// One line with every setting in effect, whatever set it: what an
	// operator greps for when a process does not do what it was told.
	logger.LogAttrs(ctx, slog.LevelInfo, "Started", append(env.Attrs(), program.Settings...)...)

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
	if err := program.Run(ctx); err != nil {
		return err
	}
	logger.InfoContext(ctx, "Stopped")
	return nil
}
