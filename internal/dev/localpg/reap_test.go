package localpg

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// noReaperEnv, set to "<port>:<data directory>", makes the test binary
// crashAndRestart that cluster instead of running the tests.
const noReaperEnv = "LOCALPG_TEST_NO_REAPER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(noReaperEnv); spec != "" {
		if err := crashAndRestart(spec); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestCrash kills a postmaster and starts its cluster again at once on the
// same port, on a machine whose init never reaps orphans. Postgres's own
// check of its lock files, kill(pid, 0), takes a zombie for a live
// postmaster, so the restart works only if the killed server has left the
// process table: only if this package reaps what it starts.
func TestCrash(t *testing.T) {
	t.Parallel()

	t.Run("RestartsAtOnceWhereNothingReapsOrphans", func(t *testing.T) {
		t.Parallel()
		opts := scratchOptions(t)
		exe, err := os.Executable()
		require.NoError(t, err)
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d:%s", noReaperEnv, opts.Port, opts.DataDir))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "the crash and restart where nothing reaps orphans:\n%s", out)
		require.Contains(t, string(out), "restarted after 2 crashes")
	})
}

// crashAndRestart plays a machine whose init never reaps: this process
// becomes a child subreaper, so every orphan among its descendants (a
// server that pg_ctl daemonised, say) is handed to it, and it reaps none of
// them but its own children. Then it crashes the cluster twice, each time
// starting it again at once.
func crashAndRestart(spec string) error {
	portText, dataDir, ok := strings.Cut(spec, ":")
	port, err := strconv.Atoi(portText)
	if !ok || err != nil {
		return fmt.Errorf("%s=%q: want <port>:<data directory>", noReaperEnv, spec)
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become a child subreaper: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Ensure(ctx, Options{DataDir: dataDir, Port: port})
	if err != nil {
		return err
	}
	const crashes = 2
	for i := range crashes {
		if err := c.Crash(); err != nil {
			return fmt.Errorf("crash %d: %w", i+1, err)
		}
		if err := c.Start(ctx); err != nil {
			return fmt.Errorf("start after crash %d: %w", i+1, err)
		}
		conn, err := connect(ctx, c.URL())
		if err != nil {
			return fmt.Errorf("after crash %d: %w", i+1, err)
		}
		_ = conn.Close(ctx)
	}
	if err := c.Stop(ctx); err != nil {
		return err
	}
	fmt.Printf("restarted after %d crashes\n", crashes)
	return nil
}
