// Command clientcheck is the conformance harness for clients of the API
// (internal/proof/clientcheck): it serves the contract's hard cases for
// POST /rides, one base URL per case, and reports, case by case, whether
// a client retried as docs/openapi.yaml says, and resumed its rides after
// its death. docs/clients.md tells a client team how to run theirs
// against it.
//
//	go run ./cmd/clientcheck                      # serve; GET /report, Ctrl-C prints it
//	go run ./cmd/clientcheck -client './myclient' # run ./myclient for every case, then report
//	go run ./cmd/clientcheck -project             # build and check the project's own clients
//
// With -client, the command runs for every case (the cases side by side)
// through sh -c, as the leader of a process group of its own, with three
// variables: RIDES_URL, the case's base URL; RIDES_TOKEN, a token the
// harness accepts; and RIDES_JOURNAL, the path of the client's journal
// file, in a fresh empty directory per case that the client owns. On
// start the command resumes every ride pending in its journal; only if
// none was pending does it create one new ride, written down in the
// journal before its first try; then it exits, whatever it got. A death
// case kills it at a chosen moment with SIGKILL to its process group,
// then runs it again with the same variables. clientcheck then prints the
// report and exits 1 if any case failed.
//
// -project does the same for each of the project's own clients
// (clientcheck.ProjectClients), built from the checkout in the current
// directory, and prints a report for each.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/rocketrides/rocketrides/internal/proof/clientcheck"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	flags := flag.NewFlagSet("clientcheck", flag.ContinueOnError)
	flags.SetOutput(stderr)
	listen := flags.String("listen", "127.0.0.1:8089", "address to serve the cases on")
	budget := flags.Int("budget", clientcheck.DefaultBudget, "the most tries a client may spend on one ride")
	command := flags.String("client", "", "a command that resumes its pending rides, or creates one, against $RIDES_URL with $RIDES_TOKEN and $RIDES_JOURNAL; run for every case")
	project := flags.Bool("project", false, "build the project's own clients from the checkout here and check each")
	timeout := flags.Duration("case-timeout", clientcheck.DefaultTimeout, "with -client or -project: how long one run of the client may take")
	if err := flags.Parse(args); err != nil {
		return 2 // the flag package has said why
	}
	timeoutSet := false
	flags.Visit(func(f *flag.Flag) { timeoutSet = timeoutSet || f.Name == "case-timeout" })
	var refused string
	switch {
	case flags.NArg() > 0:
		refused = fmt.Sprintf("unexpected argument %q (a client command goes in -client)", flags.Arg(0))
	case *budget < 1:
		refused = fmt.Sprintf("-budget must be at least 1, got %d", *budget)
	case *timeout <= 0:
		refused = fmt.Sprintf("-case-timeout must be positive, got %s", *timeout)
	case *command != "" && *project:
		refused = "-client and -project each say which client to check: give one"
	case timeoutSet && *command == "" && !*project:
		refused = "-case-timeout bounds a -client run; without -client nothing is run"
	}
	if refused != "" {
		fmt.Fprintf(stderr, "clientcheck: %s\nusage: clientcheck [-listen addr] [-budget n] [-client command | -project] [-case-timeout d]\n", refused)
		return 2
	}
	h, err := clientcheck.New(&clientcheck.Config{Budget: *budget})
	if err != nil {
		fmt.Fprintln(stderr, "clientcheck:", err)
		return 2
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(stderr, "clientcheck:", err)
		return 2
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var clients []named
	switch {
	case *project:
		out, err := os.MkdirTemp("", "clientcheck-build-")
		if err != nil {
			fmt.Fprintln(stderr, "clientcheck:", err)
			return 2
		}
		defer os.RemoveAll(out)
		for _, p := range clientcheck.ProjectClients {
			c, err := p.Prepare(ctx, ".", filepath.Join(out, p.Name))
			if err != nil {
				fmt.Fprintln(stderr, err)
				return 2
			}
			clients = append(clients, named{p.Name, c})
		}
	case *command != "":
		clients = []named{{"", clientcheck.Client{Command: *command}}}
	default:
		fmt.Printf("Serving the cases; point a client at each, then GET %s/report (Ctrl-C prints it too).\n", base)
		for _, name := range clientcheck.Names() {
			u, _ := clientcheck.URL(base, name)
			fmt.Println(" ", u)
		}
		<-ctx.Done()
		return printReport(h.Report(), "")
	}
	status := 0
	for _, c := range clients {
		h.Reset()
		c.Timeout, c.Output = *timeout, stderr
		report, err := h.Run(ctx, base, c.Client)
		if err != nil {
			fmt.Fprintln(stderr, "clientcheck:", err)
		}
		status = max(status, printReport(report, c.name))
		if ctx.Err() != nil {
			break
		}
	}
	return status
}

// named is a client to check, under the name its report is printed with.
type named struct {
	name string
	clientcheck.Client
}

// printReport prints report, under a heading naming its client when there is
// one, and returns the command's exit status for it.
func printReport(report clientcheck.Report, client string) int {
	if client != "" {
		fmt.Printf("The %s client:\n", client)
	}
	fmt.Print(report)
	if !report.Passed() {
		return 1
	}
	return 0
}
