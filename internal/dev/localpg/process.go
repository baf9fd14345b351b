package localpg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/rocketrides/rocketrides/internal/platform/config"
)

// PortAbove is the port n above the project cluster's ($LOCALPG_PORT,
// else DefaultPort). The pooler takes +3, the replicated cluster +4 to +9
// (HAOptions), the bench's cluster +10, and the scratch replicated
// clusters of the tests and drills the blocks above (HAScratchPort), so
// that a checkout that moves LOCALPG_PORT moves them all and two
// checkouts on one machine do not collide.
func PortAbove(n int) (int, error) {
	var env config.Env
	port := env.Int("LOCALPG_PORT", DefaultPort)
	if err := env.Err(); err != nil {
		return 0, err
	}
	if port+n > 65535 {
		return 0, fmt.Errorf("LOCALPG_PORT=%d: must leave room for the port %d above it", port, n)
	}
	return port + n, nil
}

// HAScratchPort is the first port of scratch replicated cluster n (0 to
// 4): a block of six ports of its own from LOCALPG_PORT+11, for the
// tests and drills that each run one while others may run theirs.
func HAScratchPort(n int) (int, error) {
	if n < 0 || n > 4 {
		return 0, fmt.Errorf("scratch replicated cluster %d: want 0 to 4", n)
	}
	return PortAbove(11 + 6*n)
}

// Crash SIGKILLs the server and every process it started, as a machine
// that loses power would stop them: nothing is flushed or said goodbye
// to. Crashing a cluster that is not running is not an error.
func (c Cluster) Crash() error {
	pid, err := c.postmasterPID()
	if err != nil || pid == 0 {
		return err
	}
	start, _ := startTime(pid)
	// Freeze the postmaster first. Killed after its children, it would
	// see one die, start reinitialising and fork new ones that nobody
	// kills; they would keep the shared memory attached, and a new server
	// refuses a segment still in use. Stopped, it forks nothing, so the
	// children listed now are all of them.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop postgres %d: %w", pid, err)
	}
	procs := append(childPIDs(pid), pid)
	starts := make([]string, len(procs))
	for i, p := range procs {
		starts[i], _ = startTime(p)
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill postgres process %d: %w", p, err)
		}
	}
	// Every process dead (a zombie has let go of the shared memory).
	for i, p := range procs {
		if err := awaitDead(context.Background(), p, starts[i]); err != nil {
			return fmt.Errorf("crash postgres in %s: %w", c.DataDir, err)
		}
	}
	// Dead is not enough for the postmaster: postgres takes the lock
	// files a zombie left behind for a live server's and refuses to start
	// on its port (child.go). A postmaster of ours is reaped at once.
	if _, ours := ownChild(pid); ours {
		if err := awaitGone(context.Background(), pid, start, "postgres"); err != nil {
			return fmt.Errorf("crash postgres in %s: %w", c.DataDir, err)
		}
		return nil
	}
	// Another's (Patroni's, whose parent is init) stays a zombie until
	// init reaps it, which some inits do late: its lock files go instead,
	// as postgres itself would drop them once the pid were gone.
	return c.removeLocksOf(pid)
}

// removeLocksOf removes the lock files of the dead postmaster pid, every
// process of which is dead: postmaster.pid and its socket's lock file,
// each only while it still names pid.
func (c Cluster) removeLocksOf(pid int) error {
	pidFile := filepath.Join(c.DataDir, "postmaster.pid")
	b, err := os.ReadFile(pidFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("crash postgres in %s: %w", c.DataDir, err)
	}
	// postmaster.pid: the pid, the data directory, the start time, the
	// port, the first socket directory, ...
	lines := strings.Split(string(b), "\n")
	if strings.TrimSpace(lines[0]) != strconv.Itoa(pid) {
		return nil // a new server's already
	}
	if len(lines) > 4 && strings.TrimSpace(lines[4]) != "" {
		socket := filepath.Join(strings.TrimSpace(lines[4]), ".s.PGSQL."+strings.TrimSpace(lines[3]))
		if lock, err := os.ReadFile(socket + ".lock"); err == nil {
			if first, _, _ := strings.Cut(string(lock), "\n"); strings.TrimSpace(first) == strconv.Itoa(pid) {
				_ = os.Remove(socket)
				if err := os.Remove(socket + ".lock"); err != nil && !errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("crash postgres in %s: %w", c.DataDir, err)
				}
			}
		}
	}
	if err := os.Remove(pidFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("crash postgres in %s: %w", c.DataDir, err)
	}
	return nil
}

// StallReplication stops the primary's WAL senders with SIGSTOP until
// resume sends SIGCONT: replication falls behind (asynchronous) or the
// primary's commits wait (synchronous). The senders, not the standby's
// receiver, because WAL already sent would wait in the receiver's socket
// buffer and survive the primary's crash.
func (c Cluster) StallReplication() (resume func() error, err error) {
	procs, err := c.Processes()
	if err != nil {
		return nil, err
	}
	if len(procs) == 0 {
		return nil, fmt.Errorf("postgres in %s is not running", c.DataDir)
	}
	var stopped []int
	resume = func() error {
		var errs []error
		for _, p := range stopped {
			if err := syscall.Kill(p, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("resume walsender %d: %w", p, err))
			}
		}
		return errors.Join(errs...)
	}
	for _, child := range procs[1:] {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", child))
		if err != nil || !strings.Contains(string(cmdline), "walsender") {
			continue
		}
		if err := syscall.Kill(child, syscall.SIGSTOP); err != nil {
			return nil, errors.Join(fmt.Errorf("stop walsender %d: %w", child, err), resume())
		}
		stopped = append(stopped, child)
	}
	if len(stopped) == 0 {
		return nil, fmt.Errorf("no walsender process under postgres %d in %s", procs[0], c.DataDir)
	}
	return resume, nil
}

// Processes are the server's processes, the postmaster first, then its
// children: backends, WAL writer, checkpointer, WAL senders. None when
// the server is not running.
func (c Cluster) Processes() ([]int, error) {
	pid, err := c.postmasterPID()
	if err != nil || pid == 0 {
		return nil, err
	}
	return append([]int{pid}, childPIDs(pid)...), nil
}

// postmasterPID reads postmaster.pid; zero when the server is not
// running, including when the file is stale: a crash leaves it behind.
func (c Cluster) postmasterPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(c.DataDir, "postmaster.pid"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read postmaster.pid: %w", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0, fmt.Errorf("parse postmaster.pid: %w", err)
	}
	if !c.isPostmaster(pid) {
		return 0, nil // a stale file
	}
	return pid, nil
}

// isPostmaster reports whether process pid runs this cluster's postgres.
func (c Cluster) isPostmaster(pid int) bool {
	return runsBinary(pid, filepath.Join(c.BinDir, "postgres"))
}

// runsBinary reports whether process pid is alive and runs binary. A pid
// file outlives its process (a crash leaves it behind) and the kernel
// hands its pid to whatever starts next: that the pid is alive does not
// make it ours to signal. A zombie, which would still take a signal, has
// no executable any more and does not count either.
func runsBinary(pid int, binary string) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return false // gone, a zombie, or another user's, which we did not start
	}
	// A binary upgraded under a running server shows as deleted.
	exe = strings.TrimSuffix(exe, " (deleted)")
	if real, err := filepath.EvalSymlinks(binary); err == nil {
		binary = real
	}
	return exe == binary
}

// childPIDs lists the processes whose parent is pid, from /proc.
func childPIDs(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var children []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if parentPID(p) == pid {
			children = append(children, p)
		}
	}
	return children
}
