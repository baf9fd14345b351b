// Command console serves the operator's console (package console) on
// HOST:PORT until SIGINT or SIGTERM (make dev sets them from CONSOLE_HOST
// and CONSOLE_PORT). People log in to their own accounts, which the
// command also manages; there is none by default (make dev adds its own):
//
//	console operator add [-reset] NAME    (the password on standard input)
//	console operator disable NAME
//
// add refuses a name an audit record would refuse and a password below
// the minimum strength (operator.CheckPassword), each by name; -reset
// sets the password of an account that exists, and enables it again.
// disable logs its sessions out at once; the account stays, for the
// audit records that name it.
//
// With SIMULATED_ERRORS=true (as make dev sets) it adds the lab, which
// sends rides to the api at CONSOLE_API_URL as the demo user (CONSOLE_LAB_TOKEN,
// else SEED_USER_TOKEN, else the seed's development token) and sets
// faults on the Stripe fake at STRIPE_API_BASE, whose /_fake/faults
// endpoint only the fake has.
//
// For scripts and runbooks, the console's settlements of a key set aside
// for a person are also a command:
//
//	console resolve adopt|release|close -key <idempotency key id> -operator <account>
//
// It acts exactly as the console's buttons do (console.SettlementNamed),
// as the enabled account named by -operator, prints what it did in the
// console's words, and exits 1 when the settlement is refused.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketrides/rocketrides/internal/console"
	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/operator"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/process"
	"github.com/rocketrides/rocketrides/internal/platform/serve"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/user"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "resolve":
			os.Exit(resolve(os.Args[2:], os.Stdout, os.Stderr))
		case "operator":
			os.Exit(operatorCommand(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
		}
	}
	process.Main(command())
}

// command is the process, for main and its tests.
func command() *process.Config {
	return &process.Config{Name: "console", Build: build}
}

// services reads the settings of the key store and the ride service the
// console acts through, as the api reads its own; open builds them.
type services struct {
	databaseURL string
	settings    rides.Settings
}

func readServices(env *config.Env) services {
	settings := rides.SettingsFromEnv(env)
	settings.Actor = "console"
	return services{
		databaseURL: env.Required("DATABASE_URL"),
		settings:    settings,
	}
}

// open opens the database as every process does (process.OpenDatabase)
// and builds the services on it, which checks the database as the api's
// do (rides.Settings.NewService), logging to logger.
func (s services) open(ctx context.Context, logger *slog.Logger) (*pgxpool.Pool, *rides.Service, *idem.Store, error) {
	pool, reg, err := process.OpenDatabase(ctx, s.databaseURL)
	if err != nil {
		return nil, nil, nil, err
	}
	svc, keys, err := s.settings.NewService(ctx, pool, reg, logger)
	if err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	return pool, svc, keys, nil
}

func build(ctx context.Context, env *config.Env, logger *slog.Logger) (*process.Program, error) {
	services := readServices(env)
	// Behind a reverse proxy that terminates TLS, the console hears
	// http; the proxy says https.
	trustProxy := env.Bool("CONSOLE_TRUST_PROXY", false)
	host := env.Host("HOST", "127.0.0.1")
	proxyHosts := console.HostsFromEnv(env)
	traceURL := console.TraceURLFromEnv(env)
	// Zero listens on any free port; the "Serving HTTP" line says which.
	port := env.Port("PORT", 5050)
	// The lab's settings are read whether or not it runs, so that -help
	// and docs/configuration.md list them.
	simulatedErrors := env.Bool("SIMULATED_ERRORS", false)
	lab := &console.Lab{
		APIURL: env.String("CONSOLE_API_URL", "http://127.0.0.1:5000"),
		Token:  env.String("CONSOLE_LAB_TOKEN", env.String("SEED_USER_TOKEN", user.DemoToken)),
		// The fake the ride service charges is the one the lab sets
		// faults on.
		StripeBase: services.settings.Stripe.BaseURL,
		StripeKey:  services.settings.Stripe.APIKey,
		Timeout:    env.Duration("CONSOLE_LAB_TIMEOUT", console.DefaultLabTimeout),
	}
	throttle := operator.Throttle{FirstWait: env.Duration("CONSOLE_LOGIN_FIRST_WAIT", operator.DefaultFirstWait)}
	if !simulatedErrors {
		lab = nil
	} else if lab.StripeBase == "" {
		return nil, errors.New("STRIPE_API_BASE is required with SIMULATED_ERRORS=true: the lab sets faults on the Stripe fake there")
	}
	if err := env.Err(); err != nil {
		return nil, err
	}
	pool, svc, keys, err := services.open(ctx, logger)
	if err != nil {
		return nil, err
	}
	operators, err := operator.New(&operator.Config{Pool: pool, Throttle: throttle})
	if err != nil {
		pool.Close()
		return nil, err
	}
	// No default account: say how to make one rather than serve a login
	// no one can pass without a word.
	if n, err := operators.CountEnabled(ctx); err != nil {
		pool.Close()
		return nil, err
	} else if n == 0 {
		logger.WarnContext(ctx, "No operator account can log in; add one with: console operator add NAME")
	}
	// Listening first: the console answers to the address the listener
	// took (PORT=0 included), and serves nothing until Run.
	var handler *console.Console
	srv, err := serve.Listen(&serve.Config{
		Name:              "console",
		Addr:              net.JoinHostPort(host, strconv.Itoa(port)),
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		// No WriteTimeout: /events streams for as long as the page is
		// open, and sets a deadline of its own for each event.
		IdleTimeout:     120 * time.Second,
		ShutdownTimeout: 5 * time.Second,
		Logger:          logger,
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	handler, err = console.New(&console.Config{Pool: pool, Keys: keys, Rides: svc, Operators: operators,
		TrustProxy: trustProxy, Hosts: append(console.ListenHosts(srv.Addr()), proxyHosts...), TraceURL: traceURL,
		Logger: logger, Lab: lab})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &process.Program{
		Run: func(ctx context.Context) error {
			if err := handler.Start(ctx); err != nil {
				return err
			}
			return srv.Serve(ctx)
		},
		Settings: []slog.Attr{slog.String("url", "http://"+srv.Addr())},
		Close:    pool.Close,
	}, nil
}

// resolve is `console resolve adopt|release|close -key N -operator NAME`.
// It prints what it did to stdout and why it did not to stderr.
func resolve(args []string, stdout, stderr io.Writer) int {
	usage := "usage: console resolve adopt|release|close -key <idempotency key id> -operator <account>"
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	action := args[0]
	flags := flag.NewFlagSet("console resolve "+action, flag.ContinueOnError)
	flags.SetOutput(stderr)
	keyID := flags.Int64("key", 0, "the idempotency key's id (as the console and the logs show it)")
	account := flags.String("operator", "", "your account's name, for the audit record")
	if err := flags.Parse(args[1:]); err != nil {
		return 2
	}
	// The operator's name is checked as the audit record will check it
	// (rides.ValidOperator): a bad one is a usage error, found before
	// the database is opened.
	*account = strings.TrimSpace(*account) // as the login trims it
	var refused *rides.OperatorError
	badOperator := errors.As(rides.ValidOperator(*account), &refused)
	settlement, known := console.SettlementNamed(action)
	switch {
	case !known:
		fmt.Fprintf(stderr, "console resolve: unknown action %q\n%s\n", action, usage)
		return 2
	case *keyID <= 0:
		fmt.Fprintf(stderr, "console resolve: -key must be a positive key id\n%s\n", usage)
		return 2
	case badOperator:
		fmt.Fprintf(stderr, "console resolve: -operator: %s\n%s\n", refused.Reason, usage)
		return 2
	case flags.NArg() > 0:
		fmt.Fprintf(stderr, "console resolve: unexpected arguments %q\n", flags.Args())
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	env := &config.Env{}
	logger, err := config.Logger(env, "console", stderr)
	if err != nil {
		fmt.Fprintf(stderr, "console resolve: %v\n", err)
		return 2
	}
	services := readServices(env)
	if err := env.Err(); err != nil {
		fmt.Fprintf(stderr, "console resolve: %v\n", err)
		return 2
	}
	pool, svc, _, err := services.open(ctx, logger)
	if err != nil {
		fmt.Fprintf(stderr, "console resolve: %v\n", err)
		return 2
	}
	defer pool.Close()
	// The audit record names an account, as the console's do: not
	// whatever name was typed.
	operators, err := operator.New(&operator.Config{Pool: pool})
	if err != nil {
		fmt.Fprintf(stderr, "console resolve: %v\n", err)
		return 2
	}
	if _, err := operators.Enabled(ctx, *account); err != nil {
		if errors.Is(err, operator.ErrNotFound) {
			fmt.Fprintf(stderr, "console resolve: -operator: no enabled account is named %q (console operator add)\n", *account)
		} else {
			fmt.Fprintf(stderr, "console resolve: %v\n", err)
		}
		return 2
	}
	// The command is run on the host it acts from, so loopback is where
	// the settlement truly came from: unlike a console request over a
	// Unix socket (clientIP), no origin is made up.
	st := rides.Settlement{KeyID: *keyID, Operator: *account, OriginIP: netip.IPv6Loopback()}
	msg, err := settlement.Run(ctx, svc, st)
	if err != nil {
		fmt.Fprintf(stderr, "console resolve %s: refused: %v\n", action, err)
		if errors.Is(err, context.Canceled) {
			return 2
		}
		return 1
	}
	fmt.Fprintf(stdout, "key %d: %s\n", *keyID, msg)
	return 0
}
