package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// errPortTaken marks a start that failed because another process took the
// port between our probe and the command's listen.
var errPortTaken = errors.New("port taken")

// Process is one command run by a Fleet. It outlives its operating-system
// processes: Kill and Restart replace the process behind it while its
// name, port, URL and log stay the same, as a supervisor's would.
type Process struct {
	// Name is the instance name, such as api-2; it names the log file.
	Name string
	// Command is the folder under cmd/ it runs.
	Command string
	// Port is the port in the process's PORT variable, kept across
	// restarts so that clients find it again.
	Port int
	// URL is http://127.0.0.1:<Port>, for commands that serve HTTP.
	URL string
	// LogPath is the file that receives its stdout and stderr, appended to
	// on every start.
	LogPath string

	path string
	args []string

	mu     sync.Mutex
	env    []string
	cmd    *exec.Cmd
	done   chan struct{} // closed when the current process has exited
	exit   error         // the current process's exit, once done
	starts int
}

// Pid is the operating-system process id of the current process, or 0.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Starts counts how often the process was started.
func (p *Process) Starts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// Running reports whether the current process has not exited.
func (p *Process) Running() bool {
	done := p.doneChan()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Done is closed when the current process exits.
func (p *Process) Done() <-chan struct{} {
	if done := p.doneChan(); done != nil {
		return done
	}
	closed := make(chan struct{})
	close(closed)
	return closed
}

// Wait waits until the current process exits, a crash at a failpoint say,
// and returns how it exited.
func (p *Process) Wait(ctx context.Context) error {
	select {
	case <-p.Done():
		return p.ExitErr()
	case <-ctx.Done():
		return fmt.Errorf("wait for %s to exit: %w", p.Name, ctx.Err())
	}
}

// ExitErr is how the last process exited: nil for status 0, an
// *exec.ExitError otherwise (its String says "signal: killed" after a
// SIGKILL). It is nil while the process runs.
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

// Kill SIGKILLs the process, as a crash or the OOM killer would, and waits
// until it is gone. Killing an exited process does nothing.
func (p *Process) Kill() error {
	return p.signalAndWait(context.Background(), syscall.SIGKILL)
}

// Stop asks the process to shut down (SIGTERM) and waits until it has;
// when ctx ends first, it is killed.
func (p *Process) Stop(ctx context.Context) error {
	err := p.signalAndWait(ctx, syscall.SIGTERM)
	if err != nil && ctx.Err() != nil {
		return p.Kill()
	}
	return err
}

// Restart stops the process if it runs (SIGTERM, or SIGKILL when ctx
// ends), applies env (KEY=VALUE overrides; KEY= clears one, such as
// FAILPOINTS=) and starts it again on the same port, waiting until it is
// ready.
func (p *Process) Restart(ctx context.Context, env ...string) error {
	if err := p.Stop(ctx); err != nil {
		return err
	}
	p.mu.Lock()
	p.env = mergeEnv(p.env, env)
	p.mu.Unlock()
	return p.launch(ctx)
}

// Log returns everything the process has written so far, over all its
// starts.
func (p *Process) Log() string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.LogPath, err)
	}
	return string(data)
}

// LogTail returns the last n lines of Log.
func (p *Process) LogTail(n int) string {
	lines := strings.Split(strings.TrimRight(p.Log(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (p *Process) doneChan() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

func (p *Process) signalAndWait(ctx context.Context, sig syscall.Signal) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s to %s: %w", sig, p.Name, err)
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for %s to exit after %s: %w", p.Name, sig, ctx.Err())
	}
}

// command prepares the process with its output going to out.
func (p *Process) command(stdout, stderr io.Writer) *exec.Cmd {
	cmd := exec.Command(p.path, p.args...)
	p.mu.Lock()
	// HOST as well as PORT: the process listens where p.URL points,
	// unless its env sets a HOST of its own, as a test of the setting
	// does.
	cmd.Env = append(mergeEnv([]string{"HOST=127.0.0.1"}, p.env), "PORT="+strconv.Itoa(p.Port))
	p.mu.Unlock()
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group: a Ctrl-C meant for the chaos command
		// reaches only the command, which stops the fleet in order.
		Setpgid: true,
		// A test binary that dies (a timeout panic, a kill) takes its
		// processes with it instead of leaving them bound to ports.
		Pdeathsig: syscall.SIGKILL,
	}
	return cmd
}

func (p *Process) openLog(what string) (*os.File, error) {
	f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", p.Name, err)
	}
	fmt.Fprintf(f, "---- fleet: %s %s %s at %s ----\n", what, p.Command, strings.Join(p.args, " "),
		time.Now().Format(time.RFC3339Nano))
	return f, nil
}

// launch starts the process and waits until it is ready.
func (p *Process) launch(ctx context.Context) error {
	logFile, err := p.openLog("start")
	if err != nil {
		return err
	}
	offset, _ := logFile.Seek(0, io.SeekEnd)
	cmd := p.command(logFile, logFile)
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.exit = cmd, done, nil
	p.starts++
	p.mu.Unlock()

	go func() {
		err := cmd.Wait()
		status := "exit status 0"
		if err != nil {
			status = err.Error()
		}
		fmt.Fprintf(logFile, "---- fleet: %s exited: %s ----\n", p.Name, status)
		logFile.Close()
		p.mu.Lock()
		p.exit = err
		p.mu.Unlock()
		close(done)
	}()

	if err := p.waitReady(ctx, done); err != nil {
		_ = p.Kill()
		if tail := p.logSince(offset); strings.Contains(tail, "address already in use") {
			return fmt.Errorf("start %s on port %d: %w", p.Name, p.Port, errPortTaken)
		}
		return fmt.Errorf("%w\nlast lines of %s:\n%s", err, p.LogPath, p.LogTail(20))
	}
	return nil
}

// waitReady polls the command's health endpoint until it answers 200.
func (p *Process) waitReady(ctx context.Context, done <-chan struct{}) error {
	path, ok := readyPaths[p.Command]
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+path, nil)
		if err != nil {
			return fmt.Errorf("check readiness of %s: %w", p.Name, err)
		}
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited before it was ready: %v", p.Name, p.ExitErr())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s%s: %w", p.Name, p.URL, path, ctx.Err())
		case <-tick.C:
		}
	}
}

func (p *Process) logSince(offset int64) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil || int64(len(data)) < offset {
		return ""
	}
	return string(data[offset:])
}

// run runs a one-shot process to completion, returning its stdout.
func (p *Process) run(ctx context.Context) (string, error) {
	logFile, err := p.openLog("run")
	if err != nil {
		return "", err
	}
	defer logFile.Close()
	var stdout bytes.Buffer
	cmd := p.command(io.MultiWriter(&stdout, logFile), logFile)
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.starts++
	p.mu.Unlock()

	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case err = <-waitErr:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		err = fmt.Errorf("killed before it finished (%v): %w", <-waitErr, ctx.Err())
	}
	p.mu.Lock()
	p.exit = err
	p.mu.Unlock()
	close(done)
	status := "exit status 0"
	if err != nil {
		status = err.Error()
	}
	fmt.Fprintf(logFile, "---- fleet: %s exited: %s ----\n", p.Name, status)
	out := strings.TrimSpace(stdout.String())
	if err != nil {
		return out, fmt.Errorf("run %s %s: %w\nlast lines of %s:\n%s", p.Command, strings.Join(p.args, " "), err, p.LogPath, p.LogTail(20))
	}
	return out, nil
}
