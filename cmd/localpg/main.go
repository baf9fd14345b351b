// Command localpg manages the project-local PostgreSQL cluster under .data/
// (see internal/dev/localpg) for the Makefile and for developers:
//
//	go run ./cmd/localpg start
//	DATABASE_URL=$(go run ./cmd/localpg url rocketrides)
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
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
	command, args := args[0], args[1:]
	switch command {
	case "replica":
		return runReplica(ctx, args)
	case "pooler":
		return runPooler(ctx, args)
	}
	maxArgs := 0
	if command == "url" {
		maxArgs = 1
	}
	if len(args) > maxArgs {
		fmt.Fprintf(os.Stderr, "localpg %s: unexpected arguments %q\n\n%s", command, args[maxArgs:], usage)
		return 2
	}

	var err error
	switch command {
	case "start":
		var c localpg.Cluster
		if c, err = localpg.Ensure(ctx, localpg.Options{}); err == nil {
			fmt.Fprintf(os.Stderr, "localpg: postgres is running at %s (data %s, log %s)\n", c.URL(), c.DataDir, c.LogFile)
		}
	case "url":
		name := "postgres"
		if len(args) == 1 {
			name = args[0]
		}
		var u string
		if u, err = localpg.DatabaseURL(ctx, name); err == nil {
			fmt.Println(u)
		}
	case "stop":
		err = withCluster(func(c localpg.Cluster) error { return c.Stop(ctx) })
	case "restart":
		err = withCluster(func(c localpg.Cluster) error { return c.Restart(ctx) })
	case "status":
		var running bool
		err = withCluster(func(c localpg.Cluster) error {
			if running, err = c.Running(ctx); err == nil {
				state := "not running"
				if running {
					state = "running at " + c.URL()
				}
				fmt.Printf("postgres in %s: %s\n", c.DataDir, state)
			}
			return err
		})
		if err == nil && !running {
			return notRunning
		}
	default:
		fmt.Fprintf(os.Stderr, "localpg: unknown command %q\n\n%s", command, usage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "localpg %s: %v\n", command, err)
		return 1
	}
	return 0
}

// withCluster runs fn on the project's cluster without starting it: stop
// and status must not start a server as a side effect.
func withCluster(fn func(localpg.Cluster) error) error {
	c, err := localpg.New(localpg.Options{})
	if err != nil {
		return err
	}
	return fn(c)
}

func runReplica(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	command, args := args[0], args[1:]
	opts := localpg.ReplicatedOptions{}
	if command == "start" && len(args) == 1 && args[0] == "-async" {
		opts.Async, args = true, nil
	}
	if len(args) > 1 || (len(args) == 1 && command != "url") {
		fmt.Fprintf(os.Stderr, "localpg replica %s: unexpected arguments %q\n\n%s", command, args, usage)
		return 2
	}
	r, err := localpg.NewReplicated(opts)
	if err == nil {
		switch command {
		case "start":
			if err = r.Start(ctx); err == nil {
				fmt.Fprintf(os.Stderr, "localpg: primary %s, standby %s\n", r.Primary().URL(), r.Standby().URL())
			}
		case "url":
			name := "postgres"
			if len(args) == 1 {
				name = args[0]
			}
			if err = r.Start(ctx); err == nil {
				if err = r.CreateDatabase(ctx, name); err == nil {
					fmt.Println(r.DatabaseURL(name))
				}
			}
		case "promote":
			err = r.Promote(ctx)
		case "crash":
			err = r.Primary().Crash()
		case "rebuild":
			err = r.Rebuild(ctx)
		case "stop":
			err = r.Stop(ctx)
		default:
			fmt.Fprintf(os.Stderr, "localpg replica: unknown command %q\n\n%s", command, usage)
			return 2
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "localpg replica %s: %v\n", command, err)
		return 1
	}
	return 0
}

func runPooler(ctx context.Context, args []string) int {
	if len(args) == 0 || len(args) > 2 || (len(args) == 2 && args[0] != "url") {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	p, err := localpg.NewPooler(localpg.PoolerOptions{})
	if err == nil {
		switch args[0] {
		case "start":
			if _, err = localpg.Ensure(ctx, localpg.Options{}); err == nil {
				err = p.Start(ctx)
			}
		case "url":
			name := "postgres"
			if len(args) == 2 {
				name = args[1]
			}
			var c localpg.Cluster
			if c, err = localpg.Ensure(ctx, localpg.Options{}); err == nil {
				if err = c.CreateDatabase(ctx, name); err == nil {
					if err = p.Start(ctx); err == nil {
						fmt.Println(p.DatabaseURL(name))
					}
				}
			}
		case "stop":
			err = p.Stop(ctx)
		default:
			fmt.Fprintf(os.Stderr, "localpg pooler: unknown command %q\n\n%s", args[0], usage)
			return 2
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "localpg pooler %s: %v\n", args[0], err)
		return 1
	}
	return 0
}
