package localpg

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A server this package starts (postgres, pgbouncer) runs as a direct
// child of the process that starts it, never daemonised through pg_ctl or
// pgbouncer -d. A daemon's parent is init, and a killed daemon stays a
// zombie until init reaps it. Some inits (in containers and small VMs)
// reap only lazily, and meanwhile postgres's lock-file check, kill(pid, 0),
// counts the zombie as a live postmaster and refuses to start a new server
// on its port. A child of ours is reaped by its own goroutine the moment
// it dies. It still outlives us: when this process exits, the kernel hands
// the server to init and it runs on, so that the next test run or make dev
// reuses it.

// child is a server this process started and waits on.
type child struct {
	exited chan struct{} // closed once the kernel has reaped it
	err    error         // what Wait said, set before exited closes
}

// children are the servers this process started, by pid.
var children sync.Map // int -> *child

// goneTimeout bounds the wait for a killed server to leave the process
// table when another process is its parent and reaps it at its own pace.
const goneTimeout = 60 * time.Second

// spawn starts bin as a server of ours: in a session of its own (a Ctrl-C
// in the terminal that started it is not meant for it), as runAs when
// that is set, its output appended to logFile, with env as its whole
// environment when env is not nil (ours otherwise).
func spawn(bin string, args []string, logFile string, runAs *account, env []string) (int, *child, error) {
	log, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, nil, fmt.Errorf("open log file: %w", err)
	}
	// The child has its own copy of the descriptor once it has started.
	defer log.Close()
	cmd := exec.Command(bin, args...)
	// The working directory may be one the server's user cannot enter
	// (root's home); "/" always can be.
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if runAs != nil {
		// syscall.Credential rather than runuser or su: no dependency on
		// util-linux, and an empty Groups drops root's supplementary groups.
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: runAs.uid, Gid: runAs.gid}
	}
	if err := cmd.Start(); err != nil {
		return 0, nil, fmt.Errorf("start %s: %w", bin, err)
	}
	pid := cmd.Process.Pid
	ch := &child{exited: make(chan struct{})}
	children.Store(pid, ch)
	go func() {
		ch.err = cmd.Wait()
		close(ch.exited)
		// Only this entry: once reaped, the pid may already be a new
		// child's.
		children.CompareAndDelete(pid, ch)
	}()
	return pid, ch, nil
}

// ownChild is the server with pid if this process started it.
func ownChild(pid int) (*child, bool) {
	v, ok := children.Load(pid)
	if !ok {
		return nil, false
	}
	return v.(*child), true
}

// awaitGone waits until the process that had pid and started at start
// (startTime) is gone from the process table, zombie included: until
// then postgres and pgbouncer take its lock and pid files for a live
// server's. A child of ours is reaped at once; any other waits for its
// parent, at most goneTimeout.
func awaitGone(ctx context.Context, pid int, start string, what string) error {
	if ch, ok := ownChild(pid); ok {
		select {
		case <-ch.exited:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("wait for %s %d to exit: %w", what, pid, ctx.Err())
		case <-time.After(goneTimeout):
			return fmt.Errorf("%s %d still runs %s after it was killed", what, pid, goneTimeout)
		}
	}
	deadline := time.Now().Add(goneTimeout)
	for {
		now, ok := startTime(pid)
		if !ok || now != start {
			return nil // gone, or its pid already someone else's
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s %d is dead but still in the process table %s later: its parent, process %d, has not reaped it, "+
				"and until it does a new server refuses the data directory; a server started by this process is reaped at once",
				what, pid, goneTimeout, parentPID(pid))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s %d to leave the process table: %w", what, pid, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// awaitDead waits until the process that had pid and started at start
// has died: gone, or a zombie, which holds no memory, socket or file any
// more. For a killed process that is a moment's wait.
func awaitDead(ctx context.Context, pid int, start string) error {
	deadline := time.Now().Add(goneTimeout)
	for {
		fields, ok := statFields(pid)
		if !ok || fields[19] != start || fields[0] == "Z" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d still runs %s after SIGKILL", pid, goneTimeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for process %d to die: %w", pid, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// statFields are the fields of /proc/<pid>/stat after the command name,
// which may hold spaces and parentheses: state is [0], ppid [1], the
// start time [19].
func statFields(pid int) ([]string, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, false
	}
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return nil, false
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 20 {
		return nil, false
	}
	return fields, true
}

// startTime is when process pid started, in clock ticks since boot: with
// the pid, it names one process, whatever the kernel later gives the pid
// to. False once no process has the pid, not even a zombie.
func startTime(pid int) (string, bool) {
	fields, ok := statFields(pid)
	if !ok {
		return "", false
	}
	return fields[19], true
}

// parentPID is process pid's parent, 0 when it is gone.
func parentPID(pid int) int {
	fields, ok := statFields(pid)
	if !ok {
		return 0
	}
	var ppid int
	_, _ = fmt.Sscan(fields[1], &ppid)
	return ppid
}
