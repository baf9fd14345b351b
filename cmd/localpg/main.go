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
