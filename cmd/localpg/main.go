// Command localpg manages the project-local PostgreSQL cluster under .data/
// (see internal/dev/localpg) for the Makefile and for developers:
//
//	go run ./cmd/localpg start
//	DATABASE_URL=$(go run ./cmd/localpg url rocketrides)
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
)

const usage = `usage: go run ./cmd/localpg <command>

commands:
  start          initialise and start the project's cluster unless it is running
  url [dbname]   start the cluster if needed, create database dbname (default
                 postgres) if missing and print its URL; when $DATABASE_URL is
                 set, print that instead and touch nothing
  stop           stop the cluster (fast mode: open transactions roll back)
  restart        restart the cluster in fast mode, starting it if stopped
  status         print whether the cluster is running; exit status 3 if not

  replica start [-async]   a primary and a streaming standby under
                           .data/replicated, on LOCALPG_PORT+1 and +2;
                           synchronous unless created with -async. The pair
                           keeps that mode: to change it, stop the pair and
                           remove .data/replicated
  replica url [dbname]     start the pair if needed, create dbname on the
                           primary and print a multi-host URL that reaches
                           whichever node is the primary
                           (target_session_attrs=read-write)
  replica promote          promote the standby (crash or stop the primary first)
  replica crash            SIGKILL the primary and its processes
  replica rebuild          copy the primary afresh into the other node
                           (pg_basebackup) and start it as the standby
  replica stop             stop both nodes

  pooler start             PgBouncer in transaction mode on LOCALPG_PORT+3 in
                           front of the project's cluster (.data/pgbouncer)
  pooler url [dbname]      start it if needed and print dbname's URL through it
  pooler stop              stop it
`

// notRunning is the exit status of status for a stopped cluster, the same
// as pg_ctl status, so scripts can test for it.
const notRunning = 3

// errNotRunning is what status returns for a stopped cluster: not a
// failure, an answer, given by the exit status alone.
var errNotRunning = errors.New("not running")

// A command is one of localpg's commands, with what it takes after its
// name: up to names database names and the flags listed.
type command struct {
	name  string
	names int
	flags []string
	run   func(ctx context.Context, a arguments) error
}

// arguments are a command's arguments once checked against its command.
type arguments struct {
	dbname string // postgres unless given
	flags  map[string]bool
}

// commands are every command line localpg accepts. A command line is
// checked against this table before anything is built or started.
var commands = []command{
	{name: "start", run: start},
	{name: "url", names: 1, run: url},
	{name: "stop", run: withCluster(func(ctx context.Context, c localpg.Cluster) error { return c.Stop(ctx) })},
	{name: "restart", run: withCluster(func(ctx context.Context, c localpg.Cluster) error { return c.Restart(ctx) })},
	{name: "status", run: withCluster(status)},

	{name: "replica start", flags: []string{"-async"}, run: withPair(replicaStart)},
	{name: "replica url", names: 1, run: withPair(replicaURL)},
	{name: "replica promote", run: withPair(func(ctx context.Context, r *localpg.Replicated, _ arguments) error { return r.Promote(ctx) })},
	{name: "replica crash", run: withPair(func(_ context.Context, r *localpg.Replicated, _ arguments) error { return r.Primary().Crash() })},
	{name: "replica rebuild", run: withPair(func(ctx context.Context, r *localpg.Replicated, _ arguments) error { return r.Rebuild(ctx) })},
	{name: "replica stop", run: withPair(func(ctx context.Context, r *localpg.Replicated, _ arguments) error { return r.Stop(ctx) })},

	{name: "pooler start", run: withPooler(poolerStart)},
	{name: "pooler url", names: 1, run: withPooler(poolerURL)},
	{name: "pooler stop", run: withPooler(func(ctx context.Context, p *localpg.Pooler, _ arguments) error { return p.Stop(ctx) })},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	c, a, err := parse(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%v\n\n%s", err, usage)
		return 2
	}
	return exit(c.name, c.run(ctx, a))
}

// parse finds the command args name in commands and checks what follows
// its name against what it takes.
func parse(args []string) (command, arguments, error) {
	name, rest := args[0], args[1:]
	group := slices.ContainsFunc(commands, func(c command) bool { return strings.HasPrefix(c.name, name+" ") })
	if group {
		if len(rest) == 0 {
			return command{}, arguments{}, fmt.Errorf("localpg %s: missing command", name)
		}
		name, rest = name+" "+rest[0], rest[1:]
	}
	i := slices.IndexFunc(commands, func(c command) bool { return c.name == name })
	if i < 0 {
		return command{}, arguments{}, fmt.Errorf("localpg: unknown command %q", name)
	}
	c := commands[i]
	a := arguments{dbname: "postgres", flags: map[string]bool{}}
	var names, unexpected []string
	for _, arg := range rest {
		switch {
		case slices.Contains(c.flags, arg) && !a.flags[arg]:
			a.flags[arg] = true
		case !strings.HasPrefix(arg, "-") && len(names) < c.names:
			names = append(names, arg)
		default:
			unexpected = append(unexpected, arg)
		}
	}
	if len(unexpected) > 0 {
		return command{}, arguments{}, fmt.Errorf("localpg %s: unexpected arguments %q", name, unexpected)
	}
	if len(names) > 0 {
		if names[0] == "" {
			return command{}, arguments{}, fmt.Errorf("localpg %s: the database name is empty", name)
		}
		a.dbname = names[0]
	}
	return c, a, nil
}

// exit is the exit status of command's outcome, saying why on stderr
// when it failed.
func exit(command string, err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errNotRunning):
		return notRunning
	}
	fmt.Fprintf(os.Stderr, "localpg %s: %v\n", command, err)
	return 1
}

func start(ctx context.Context, _ arguments) error {
	c, err := localpg.Ensure(ctx, localpg.Options{})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "localpg: postgres is running at %s (data %s, log %s)\n", c.URL(), c.DataDir, c.LogFile)
	return nil
}

func url(ctx context.Context, a arguments) error {
	u, err := localpg.DatabaseURL(ctx, a.dbname)
	if err != nil {
		return err
	}
	fmt.Println(u)
	return nil
}

func status(ctx context.Context, c localpg.Cluster) error {
	running, err := c.Running(ctx)
	if err != nil {
		return err
	}
	state := "not running"
	if running {
		state = "running at " + c.URL()
	}
	fmt.Printf("postgres in %s: %s\n", c.DataDir, state)
	if !running {
		return errNotRunning
	}
	return nil
}

// withCluster runs fn on the project's cluster without starting it: stop
// and status must not start a server as a side effect.
func withCluster(fn func(context.Context, localpg.Cluster) error) func(context.Context, arguments) error {
	return func(ctx context.Context, _ arguments) error {
		c, err := localpg.New(localpg.Options{})
		if err != nil {
			return err
		}
		return fn(ctx, c)
	}
}

// withPair runs fn on the project's replicated pair, asynchronous with
// -async.
func withPair(fn func(context.Context, *localpg.Replicated, arguments) error) func(context.Context, arguments) error {
	return func(ctx context.Context, a arguments) error {
		r, err := localpg.NewReplicated(localpg.ReplicatedOptions{Async: a.flags["-async"]})
		if err != nil {
			return err
		}
		return fn(ctx, r, a)
	}
}

func replicaStart(ctx context.Context, r *localpg.Replicated, _ arguments) error {
	if err := r.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "localpg: primary %s, standby %s\n", r.Primary().URL(), r.Standby().URL())
	return nil
}

func replicaURL(ctx context.Context, r *localpg.Replicated, a arguments) error {
	if err := r.Start(ctx); err != nil {
		return err
	}
	if err := r.CreateDatabase(ctx, a.dbname); err != nil {
		return err
	}
	fmt.Println(r.DatabaseURL(a.dbname))
	return nil
}

// withPooler runs fn on the project's PgBouncer.
func withPooler(fn func(context.Context, *localpg.Pooler, arguments) error) func(context.Context, arguments) error {
	return func(ctx context.Context, a arguments) error {
		p, err := localpg.NewPooler(localpg.PoolerOptions{})
		if err != nil {
			return err
		}
		return fn(ctx, p, a)
	}
}

func poolerStart(ctx context.Context, p *localpg.Pooler, _ arguments) error {
	if _, err := localpg.Ensure(ctx, localpg.Options{}); err != nil {
		return err
	}
	return p.Start(ctx)
}

func poolerURL(ctx context.Context, p *localpg.Pooler, a arguments) error {
	c, err := localpg.Ensure(ctx, localpg.Options{})
	if err != nil {
		return err
	}
	if err := c.CreateDatabase(ctx, a.dbname); err != nil {
		return err
	}
	if err := p.Start(ctx); err != nil {
		return err
	}
	fmt.Println(p.DatabaseURL(a.dbname))
	return nil
}
