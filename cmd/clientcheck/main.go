// Command clientcheck is the conformance harness for clients of the API
// (internal/proof/clientcheck): it serves the contract's hard cases for
// POST /rides, one base URL per case, and reports, case by case, whether
// a client retried as docs/openapi.yaml says. docs/clients.md tells a
// client team how to run theirs against it.
//
//	go run ./cmd/clientcheck                      # serve; GET /report, Ctrl-C prints it
//	go run ./cmd/clientcheck -client './myclient' # run ./myclient once per case, then report
//
// With -client, the command runs once per case, through sh -c, with
// RIDES_URL set to the case's base URL and RIDES_TOKEN to a token the
// harness accepts; it should create one ride and exit, whatever it got.
// clientcheck then prints the report and exits 1 if any case failed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/rocketrides/rocketrides/internal/proof/clientcheck"
)

// token is the API token handed to a client under test; the harness
// accepts any.
const token = "rr_clientcheck_token_0123456789"

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	flags := flag.NewFlagSet("clientcheck", flag.ContinueOnError)
	flags.SetOutput(stderr)
	listen := flags.String("listen", "127.0.0.1:8089", "address to serve the cases on")
	budget := flags.Int("budget", clientcheck.DefaultBudget, "the most tries a client may spend on one ride")
	command := flags.String("client", "", "a command that creates one ride against $RIDES_URL with $RIDES_TOKEN; run once per case")
	timeout := flags.Duration("case-timeout", 2*time.Minute, "with -client: how long one case's run may take")
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
	case timeoutSet && *command == "":
		refused = "-case-timeout bounds a -client run; without -client nothing is run"
	}
	if refused != "" {
		fmt.Fprintf(stderr, "clientcheck: %s\nusage: clientcheck [-listen addr] [-budget n] [-client command [-case-timeout d]]\n", refused)
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
	if *command == "" {
		fmt.Printf("Serving the cases; point a client at each, then GET %s/report (Ctrl-C prints it too).\n", base)
		for _, name := range clientcheck.Names() {
			u, _ := clientcheck.URL(base, name)
			fmt.Println(" ", u)
		}
		<-ctx.Done()
	} else {
		for _, name := range clientcheck.Names() {
			u, _ := clientcheck.URL(base, name)
			if err := runClient(ctx, *command, u, *timeout); err != nil {
				fmt.Fprintf(stderr, "clientcheck: %s: %v\n", name, err)
			}
			if ctx.Err() != nil {
				break
			}
		}
	}
	report := h.Report()
	fmt.Print(report)
	if !report.Passed() {
		return 1
	}
	return 0
}

// runClient runs command for one case. Its exit status is the client's
// business (a declined card may well exit 1); only a run that could not
// start or did not end in time is reported.
func runClient(ctx context.Context, command, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Env = append(os.Environ(), "RIDES_URL="+url, "RIDES_TOKEN="+token)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("the client did not finish within %s", timeout)
	case ctx.Err() != nil:
		return errors.New("interrupted before the client finished")
	case errors.As(err, &exit):
		return nil
	}
	return err
}
