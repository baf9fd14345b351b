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
	"maps"
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

  ha start [-strict|-relaxed|-async]
                           etcd and two PostgreSQL nodes managed by Patroni
                           under .data/ha, on LOCALPG_PORT+4 to +9 (etcd's
                           client and peer ports, then each node's Postgres
                           and REST API ports). Patroni alone decides which
                           node leads. The mode is set when the cluster is
                           created, strict unless asked otherwise, and kept:
                           -strict  no commit returns until the standby has
                                    it; while either node is down, no write
                                    is taken
                           -relaxed the same, but with the standby down
                                    writes go on, confirmed by the leader
                                    alone
                           -async   the leader confirms commits alone
                           A flag the cluster was not created with is refused
  ha url [dbname]          start the cluster if needed (strict when it is
                           created), create dbname on the leader and print a
                           multi-host URL that reaches whichever node leads
                           (target_session_attrs=read-write)
  ha status                print each node's role and state as Patroni sees
                           them; exit status 3 if the cluster is not running
  ha kill-leader           SIGKILL the leader's Patroni and its Postgres, as
                           a machine that dies; the other node takes over
                           once the leader lock expires (strict: it takes
                           no writes until the killed one is back), and ha
                           start brings the killed one back: it rewinds and
                           rejoins as a standby by itself
  ha stop                  stop both nodes and etcd

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
// name: up to names database names and at most one of the flags listed.
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
	{name: "stop", run: withCluster(stop)},
	{name: "restart", run: withCluster(func(ctx context.Context, c localpg.Cluster) error { return c.Restart(ctx) })},
	{name: "status", run: withCluster(status)},

	{name: "ha start", flags: haModeFlags, run: withHA(haStart)},
	{name: "ha url", names: 1, run: withHA(haURL)},
	{name: "ha status", run: withHA(haStatus)},
	{name: "ha kill-leader", run: withHA(haKillLeader)},
	{name: "ha stop", run: withHA(haStop)},

	{name: "pooler start", run: withPooler(poolerStart)},
	{name: "pooler url", names: 1, run: withPooler(poolerURL)},
	{name: "pooler stop", run: withPooler(poolerStop)},
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
	if len(a.flags) > 1 {
		return command{}, arguments{}, fmt.Errorf("localpg %s: %s exclude each other", name, strings.Join(slices.Sorted(maps.Keys(a.flags)), " and "))
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

// stop stops the cluster and says what it stopped, or that nothing ran:
// make stop's output.
func stop(ctx context.Context, c localpg.Cluster) error {
	running, err := c.Running(ctx)
	if err != nil {
		return err
	}
	if !running {
		fmt.Fprintf(os.Stderr, "localpg: postgres in %s was not running\n", c.DataDir)
		return nil
	}
	if err := c.Stop(ctx); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "localpg: stopped postgres at %s (data %s)\n", c.URL(), c.DataDir)
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

// haModeFlags are ha start's flags, each a mode (localpg.HAMode).
var haModeFlags = []string{"-strict", "-relaxed", "-async"}

// withHA runs fn on the project's replicated cluster, in the mode a flag
// asks for. Without one, a cluster that exists keeps the mode it was
// created in, and a new one is strict: the project's cluster never
// acknowledges a ride that only one machine has.
func withHA(fn func(context.Context, *localpg.HA, arguments) error) func(context.Context, arguments) error {
	return func(ctx context.Context, a arguments) error {
		var mode localpg.HAMode
		for _, flag := range haModeFlags {
			if a.flags[flag] {
				mode = localpg.HAMode(strings.TrimPrefix(flag, "-"))
			}
		}
		h, err := localpg.NewHA(localpg.HAOptions{Mode: mode})
		if err != nil {
			return err
		}
		if mode == "" && !h.Created() {
			h.Mode = localpg.HAStrict
		}
		return fn(ctx, h, a)
	}
}

func haStart(ctx context.Context, h *localpg.HA, _ arguments) error {
	if err := h.Start(ctx); err != nil {
		return err
	}
	leader, err := h.Leader(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "localpg: leader %s at %s, standby %s, %s (logs %s, %s)\n",
		leader.Name, leader.URL(), h.Other(leader).Name, h.Mode, h.Nodes[0].LogFile, h.Nodes[1].LogFile)
	return nil
}

func haURL(ctx context.Context, h *localpg.HA, a arguments) error {
	if err := h.Start(ctx); err != nil {
		return err
	}
	if err := h.CreateDatabase(ctx, a.dbname); err != nil {
		return err
	}
	fmt.Println(h.DatabaseURL(a.dbname))
	return nil
}

func haStatus(ctx context.Context, h *localpg.HA, _ arguments) error {
	members, err := h.Members(ctx)
	if err != nil {
		fmt.Printf("replicated cluster in %s: not running\n", h.Dir)
		return errNotRunning
	}
	for _, m := range members {
		fmt.Printf("%s: %s, %s\n", m.Name, m.Role, m.State)
	}
	return nil
}

func haStop(ctx context.Context, h *localpg.HA, _ arguments) error {
	var running []string
	for _, n := range h.Nodes {
		if ok, err := n.Postgres().Running(ctx); err == nil && ok {
			running = append(running, n.Name+" at "+n.URL())
		}
	}
	if err := h.Stop(ctx); err != nil {
		return err
	}
	if len(running) == 0 {
		fmt.Fprintf(os.Stderr, "localpg: the replicated cluster in %s was not running\n", h.Dir)
		return nil
	}
	fmt.Fprintf(os.Stderr, "localpg: stopped the replicated cluster in %s: %s, their Patroni agents and etcd\n", h.Dir, strings.Join(running, ", "))
	return nil
}

func haKillLeader(ctx context.Context, h *localpg.HA, _ arguments) error {
	leader, err := h.Leader(ctx)
	if err != nil {
		return err
	}
	if err := leader.Kill(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "localpg: killed %s; bring it back with: go run ./cmd/localpg ha start (a strict cluster takes no writes until then)\n", leader.Name)
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

func poolerStop(ctx context.Context, p *localpg.Pooler, _ arguments) error {
	if !p.Running() {
		fmt.Fprintf(os.Stderr, "localpg: pgbouncer on port %d was not running\n", p.Port)
		return nil
	}
	if err := p.Stop(ctx); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "localpg: stopped pgbouncer on port %d\n", p.Port)
	return nil
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
