// Command bench measures Rocket Rides against the ceiling of its database
// work on a scratch cluster (.data/bench) and prints the figures next to
// the project's targets; see docs/scaling.md. It takes under ten minutes.
//
//	go run ./cmd/bench -json .data/bench/results.json
//	go run ./cmd/bench -quick -only limit,new
//	go run ./cmd/bench -only new,replay -limits   # what the rate limits cost
//	go run ./cmd/bench -only tracing              # what tracing costs the api
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/rocketrides/rocketrides/internal/platform/project"
	"github.com/rocketrides/rocketrides/internal/proof/bench"
)

func main() { os.Exit(run()) }

func run() int {
	quick := flag.Bool("quick", false, "short steps and 100k keys instead of 5M: a smoke run")
	jsonPath := flag.String("json", "", "also write the figures as JSON to this file")
	only := flag.String("only", "", "comma-separated steps to run (default all): "+strings.Join(bench.Steps, ","))
	port := flag.Int("port", 0, "port of the bench's own Postgres cluster (default LOCALPG_PORT+10, 54339 without it)")
	keep := flag.Bool("keep", false, "leave the bench cluster running afterwards")
	profile := flag.String("profile", "", "write a CPU profile of the api over new rides at 32 clients to this file (go tool pprof)")
	limits := flag.Bool("limits", false, "run the api with every rate limit on, each too high to be reached (default RATE_LIMITS=off): what counting costs")
	floor := flag.Bool("floor", false, "serve the api's I/O floor on $HOST:$PORT until stopped; the new step runs it (internal/proof/bench/floor.go)")
	minimalAPI := flag.Bool("minimal-api", false, "serve the minimal design's api on $HOST:$PORT until stopped; the new step runs it (internal/proof/bench/minimal.go)")
	flag.Parse()
	if err := checkFlags(*profile, *jsonPath, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	for _, ref := range []struct {
		on    bool
		flag  string
		serve func(context.Context) error
	}{{*floor, "-floor", bench.ServeFloor}, {*minimalAPI, "-minimal-api", bench.ServeMinimalAPI}} {
		if ref.on {
			if err := ref.serve(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "bench "+ref.flag+":", err)
				return 1
			}
			return 0
		}
	}
	root, err := project.Root()
	var report *bench.Report
	if err == nil {
		report, err = bench.Run(ctx, bench.Config{Root: root, Port: *port, Quick: *quick, Keep: *keep, Profile: *profile, JSON: *jsonPath, Log: os.Stderr, RateLimits: *limits,
			Only: strings.FieldsFunc(*only, func(r rune) bool { return r == ',' }), Command: strings.Join(append([]string{"bench"}, os.Args[1:]...), " ")})
	}
	if report != nil {
		fmt.Println()
		report.WriteText(os.Stdout)
		if *jsonPath != "" {
			err = errors.Join(err, report.WriteJSON(*jsonPath))
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	return 0
}

// checkFlags refuses a command line the run would misread, before
// anything starts. Flag parsing stops at the first word that is not a
// flag: in "bench quick -only new", -only would go unread and every step
// would run.
func checkFlags(profile, jsonPath string, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments %q", args)
	}
	// -profile -quick would profile into a file named -quick, and -json
	// -quick write the figures to one.
	for _, f := range []struct{ name, path string }{{"profile", profile}, {"json", jsonPath}} {
		if strings.HasPrefix(f.path, "-") {
			return fmt.Errorf("-%s needs a file name, got the flag-like %q", f.name, f.path)
		}
	}
	return nil
}
