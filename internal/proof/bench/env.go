package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
)

// The databases a run creates afresh in its cluster.
const (
	limitDB = "bench_limit" // pgbench's
	apiDB   = "bench_api"   // the api's, and later the scale and background steps'
)

// stripeKey is any test key: the fake accepts every sk_test_ key.
const stripeKey = "sk_test_rocketrides_bench"

// build compiles every command into dir. A command that does not build
// (someone is halfway through writing it) costs only the steps that need
// it: the others are built one by one.
func build(ctx context.Context, root, dir string, logf func(string, ...any)) (map[string]bool, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	built := map[string]bool{}
	entries, err := os.ReadDir(filepath.Join(root, "cmd"))
	if err != nil {
		return nil, fmt.Errorf("list commands: %w", err)
	}
	var cmds []string
	for _, e := range entries {
		if e.IsDir() {
			cmds = append(cmds, e.Name())
		}
	}
	out, err := goBuild(ctx, root, dir, "./cmd/...")
	if err == nil {
		for _, c := range cmds {
			built[c] = true
		}
		return built, nil
	}
	logf("go build ./cmd/... failed; building commands one by one:\n%s", out)
	for _, c := range cmds {
		if out, err := goBuild(ctx, root, dir, "./cmd/"+c); err != nil {
			logf("cmd/%s does not build; steps that need it are skipped:\n%s", c, out)
			continue
		}
		built[c] = true
	}
	for _, need := range []string{"api", "fakestripe", "migrate", "seed"} {
		if !built[need] {
			return nil, fmt.Errorf("cmd/%s does not build", need)
		}
	}
	return built, nil
}

func goBuild(ctx context.Context, root, dir, pkg string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator), pkg)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// benchSharedBuffers is the bench cluster's shared_buffers. Postgres's
// default of 128 MB is sized to start anywhere, not to serve: with 6M keys
// the unique index on (user_id, idempotency_key) alone is about 400 MB,
// and a replay of a random key then reads its leaf from the operating
// system's cache instead of shared buffers. A gigabyte holds the indexes
// of the scale step, as a database host sized for its table would; it is
// a sixth of what the usual rule (a quarter of RAM) gives on 24 GiB.
const benchSharedBuffers = "1GB"

// startCluster starts the bench's own cluster and creates its databases
// afresh.
func startCluster(ctx context.Context, dataDir string, port int) (localpg.Cluster, error) {
	c, err := localpg.Ensure(ctx, localpg.Options{DataDir: dataDir, Port: port, SharedBuffers: benchSharedBuffers})
	if err != nil {
		return c, err
	}
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		return c, fmt.Errorf("connect to bench cluster: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, name := range []string{limitDB, apiDB} {
		ident := pgx.Identifier{name}.Sanitize()
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			return c, fmt.Errorf("drop database %s: %w", name, err)
		}
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
			return c, fmt.Errorf("create database %s: %w", name, err)
		}
	}
	return c, nil
}

// lockRun takes dir/run.lock for the whole run: two runs on one cluster
// would drop each other's databases and stop each other's server.
func lockRun(dir string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	path := filepath.Join(dir, "run.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another bench run is using %s (it holds %s); wait for it to finish", dir, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { _ = f.Close() }, nil
}

// proc is a process the bench started; stop ends it.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  *os.File
}

// startProc starts bin with env (and nothing else from ours, so that a
// DATABASE_URL in the caller's shell cannot point a process elsewhere),
// its output going to logDir/name.log.
func startProc(logDir, name, bin string, env []string, args ...string) (*proc, error) {
	logFile, err := os.Create(filepath.Join(logDir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("create log of %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(baseEnv(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), log: logFile}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func baseEnv() []string {
	var env []string
	for _, name := range []string{"PATH", "HOME", "TMPDIR", "LOG_LEVEL", "LOG_FORMAT"} {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return env
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks the process to shut down gracefully, then kills it.
func (p *proc) stop() {
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	_ = p.log.Close()
}

// waitHTTP waits until url answers 200, or the process dies.
func waitHTTP(ctx context.Context, p *proc, url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if p.exited() {
			return fmt.Errorf("%s exited before it was ready (%v); see %s", p.name, p.err, p.log.Name())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s after 30s; see %s", p.name, url, p.log.Name())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// runTool runs a command to completion and returns its standard output.
func runTool(ctx context.Context, bin string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(baseEnv(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err,
			lastLines(stderr.String(), 10))
	}
	return stdout.String(), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// freePort returns a loopback port nobody listens on right now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// peakRSS returns a process's peak resident set size (VmHWM) in bytes.
func peakRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			fields := strings.Fields(rest)
			if len(fields) != 2 || fields[1] != "kB" {
				break
			}
			kb, err := strconv.ParseInt(fields[0], 10, 64)
			if err != nil {
				break
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no VmHWM in /proc/<pid>/status")
}

// loadAverage is /proc/loadavg's first three fields: on a shared machine,
// what else was running.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	fields := strings.Fields(string(data))
	if len(fields) < 3 {
		return "unknown"
	}
	return strings.Join(fields[:3], " ")
}

func memoryGiB() float64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			fields := strings.Fields(rest)
			if kb, err := strconv.ParseFloat(fields[0], 64); err == nil {
				return kb / (1 << 20)
			}
		}
	}
	return 0
}

// ProjectRoot is the nearest directory at or above the working directory
// that holds go.mod.
func ProjectRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no go.mod in %s or above", wd)
		}
	}
}

// timeWait counts the machine's TCP sockets in TIME_WAIT. Each is a
// connection closed in the last minute, so a count that grows by
// thousands over a step means connections opened per request instead of
// reused (the api's Stripe client, for one).
func timeWait() int {
	data, err := os.ReadFile("/proc/net/sockstat")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "TCP:" {
			continue
		}
		for i := 1; i+1 < len(fields); i += 2 {
			if fields[i] == "tw" {
				n, err := strconv.Atoi(fields[i+1])
				if err != nil {
					return -1
				}
				return n
			}
		}
	}
	return -1
}

func timeWaitNote(before int) string {
	after := timeWait()
	if before < 0 || after < 0 {
		return ""
	}
	return fmt.Sprintf("TIME_WAIT sockets %+d", after-before)
}
