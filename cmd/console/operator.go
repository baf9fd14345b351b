package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/rocketrides/rocketrides/internal/operator"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/db"
)

const operatorUsage = `usage: console operator add [-reset] NAME    (the password on standard input)
       console operator disable NAME`

// operatorCommand is `console operator add [-reset] NAME` and `console
// operator disable NAME`. A bad name or a weak password is a usage error
// (2), found before the database is opened; an account that exists (add)
// or does not (disable) is a refusal (1).
func operatorCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, operatorUsage)
		return 2
	}
	action := args[0]
	flags := flag.NewFlagSet("console operator "+action, flag.ContinueOnError)
	flags.SetOutput(stderr)
	reset := new(bool)
	switch action {
	case "add":
		reset = flags.Bool("reset", false, "if the account exists, set its password and enable it again (its sessions end) instead of refusing")
	case "disable":
	default:
		fmt.Fprintf(stderr, "console operator: unknown action %q\n%s\n", action, operatorUsage)
		return 2
	}
	if err := flags.Parse(args[1:]); err != nil {
		return 2
	}
	if flags.NArg() != 1 {
		fmt.Fprintf(stderr, "console operator %s: one account name, please\n%s\n", action, operatorUsage)
		return 2
	}
	name := flags.Arg(0)
	if err := operator.CheckName(name); err != nil {
		fmt.Fprintf(stderr, "console operator %s: %v\n", action, err)
		return 2
	}
	var password string
	if action == "add" {
		var err error
		if password, err = readPassword(stdin, stderr, name); err != nil {
			fmt.Fprintf(stderr, "console operator add: %v\n", err)
			return 2
		}
		if err := operator.CheckPassword(name, password); err != nil {
			fmt.Fprintf(stderr, "console operator add: %v\n", err)
			return 2
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	env := &config.Env{}
	url := env.Required("DATABASE_URL")
	if err := env.Err(); err != nil {
		fmt.Fprintf(stderr, "console operator %s: %v\n", action, err)
		return 2
	}
	pool, err := db.Open(ctx, url, 2)
	if err != nil {
		fmt.Fprintf(stderr, "console operator %s: %v\n", action, err)
		return 2
	}
	defer pool.Close()
	operators, err := operator.New(&operator.Config{Pool: pool})
	if err != nil {
		fmt.Fprintf(stderr, "console operator %s: %v\n", action, err)
		return 2
	}

	switch {
	case action == "disable":
		d, err := operators.Disable(ctx, name)
		if err != nil {
			fmt.Fprintf(stderr, "console operator disable: %v\n", err)
			return exitCode(err, operator.ErrNotFound)
		}
		fmt.Fprintf(stdout, "account %q disabled since %s; %d sessions ended\n", d.Operator.Name, d.Since.UTC().Format("2006-01-02 15:04:05Z"), d.SessionsEnded)
	case *reset:
		if _, err := operators.Reset(ctx, name, password); err != nil {
			fmt.Fprintf(stderr, "console operator add: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "account %q: password set, enabled, its earlier sessions ended\n", name)
	default:
		if _, err := operators.Add(ctx, name, password); err != nil {
			fmt.Fprintf(stderr, "console operator add: %v", err)
			if errors.Is(err, operator.ErrExists) {
				fmt.Fprint(stderr, " (-reset sets its password)")
			}
			fmt.Fprintln(stderr)
			return exitCode(err, operator.ErrExists)
		}
		fmt.Fprintf(stdout, "account %q added\n", name)
	}
	return 0
}

// exitCode is 1 for the refusal expected, and 2 for anything else (the
// database could not be reached).
func exitCode(err, refusal error) int {
	if errors.Is(err, refusal) {
		return 1
	}
	return 2
}

// readPassword reads the password from stdin: typed twice, unechoed, at a
// terminal; otherwise the whole input, less the line break that ends it,
// so that `printf '%s\n' "$pw" | console operator add ada` and a file
// both work.
func readPassword(stdin io.Reader, stderr io.Writer, name string) (string, error) {
	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		ask := func(prompt string) (string, error) {
			fmt.Fprint(stderr, prompt)
			b, err := term.ReadPassword(int(f.Fd()))
			fmt.Fprintln(stderr)
			return string(b), err
		}
		first, err := ask(fmt.Sprintf("Password for %s (at least %d characters): ", name, operator.MinPasswordLength))
		if err != nil {
			return "", fmt.Errorf("read the password: %w", err)
		}
		again, err := ask("Again: ")
		if err != nil {
			return "", fmt.Errorf("read the password: %w", err)
		}
		if first != again {
			return "", errors.New("the two passwords differ")
		}
		return first, nil
	}
	// Four bytes a character at most, and the line break.
	b, err := io.ReadAll(io.LimitReader(stdin, 4*operator.MaxPasswordLength+3))
	if err != nil {
		return "", fmt.Errorf("read the password from standard input: %w", err)
	}
	b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
	if len(b) == 0 {
		return "", errors.New("no password on standard input")
	}
	return string(b), nil
}
