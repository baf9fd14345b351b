package clientcheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Client is a client command under test, run as docs/clients.md ("The
// command's contract") says: through sh -c, in a process group of its
// own, with RIDES_URL, RIDES_TOKEN and RIDES_JOURNAL.
type Client struct {
	// Command creates one ride, or resumes the pending ones. Required.
	Command string
	// Dir is the directory it runs in; empty: the current one.
	Dir string
	// Env is added to the environment it inherits.
	Env []string
	// Token is its RIDES_TOKEN; empty: DefaultToken.
	Token string
	// Timeout bounds one run; zero means DefaultTimeout.
	Timeout time.Duration
	// Output receives its standard output and error; nil discards them.
	Output io.Writer
}

// DefaultToken is the API token handed to a client unless told
// otherwise; the harness accepts any.
const DefaultToken = "rr_clientcheck_token_0123456789"

// DefaultTimeout bounds one run of a client command.
const DefaultTimeout = 2 * time.Minute

// Run runs c against every case of the harness, served at base, the
// cases side by side (each waits on its own clock), and returns the
// report. A death case runs the command, kills it with SIGKILL to its
// process group when the case says, and runs it again with the same
// journal. Its error names each case whose run could not start or did
// not end in time; the command's exit status is its own business.
func (h *Harness) Run(ctx context.Context, base string, c Client) (Report, error) {
	if c.Command == "" {
		return Report{}, errors.New("clientcheck: Client.Command is required")
	}
	if c.Token == "" {
		c.Token = DefaultToken
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	errs := make([]error, len(cases))
	var wg sync.WaitGroup
	for i, cs := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.runCase(ctx, base, c, cs); err != nil {
				errs[i] = fmt.Errorf("%s: %w", cs.Name, err)
			}
		}()
	}
	wg.Wait()
	return h.Report(), errors.Join(errs...)
}

// runCase runs c for one case, in a fresh journal directory, twice for a
// death case.
func (h *Harness) runCase(ctx context.Context, base string, c Client, cs Case) error {
	dir, err := os.MkdirTemp("", "clientcheck-"+cs.Name+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	url, _ := URL(base, cs.Name)
	env := append(os.Environ(), c.Env...)
	env = append(env, "RIDES_URL="+url, "RIDES_TOKEN="+c.Token, "RIDES_JOURNAL="+filepath.Join(dir, "rides-journal"))
	if !cs.Dies() {
		return runCommand(ctx, c, env, nil)
	}
	if err := runCommand(ctx, c, env, h.kills[cs.Name]); err != nil {
		return err
	}
	h.restarted(cs.Name)
	return runCommand(ctx, c, env, nil)
}

// runCommand runs c once with env until it exits, or until kill says to
// kill it (after the wait kill carries), or until its timeout.
func runCommand(ctx context.Context, c Client, env []string, kill <-chan time.Duration) error {
	cmd := exec.Command("sh", "-c", c.Command)
	cmd.Dir, cmd.Env = c.Dir, env
	cmd.Stdout, cmd.Stderr = c.Output, c.Output
	// A group of its own, so that SIGKILL takes whatever the command
	// started too (sh, a runtime, a child it spawned), as the system
	// takes an app.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // its exit status is the client's business
		close(exited)
	}()
	killGroup := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // gone already: nothing to kill
		<-exited
	}
	timeout := time.NewTimer(c.Timeout)
	defer timeout.Stop()
	select {
	case <-exited:
		return nil
	case wait := <-kill:
		select {
		case <-exited:
			// It ended before the moment came: the report says what
			// it did.
		case <-time.After(wait):
			killGroup()
		}
		return nil
	case <-timeout.C:
		killGroup()
		return fmt.Errorf("the client did not finish within %s", c.Timeout)
	case <-ctx.Done():
		killGroup()
		return errors.New("interrupted before the client finished")
	}
}
