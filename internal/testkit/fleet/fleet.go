// Package fleet runs the project's commands as real processes, for
// black-box tests and the chaos soak: the api, the Stripe fake, the
// enqueuer, the worker, the completer and whatever else lives under cmd/.
//
// The point is to fail the way production fails. A crash at a failpoint
// seam is a SIGKILL of a real process (no deferred unlock, no graceful
// shutdown, a dropped connection for its client); a restart is a new
// process that knows only what Postgres and Stripe remember. In-process
// tests cannot show that, because their "crash" is an error return that
// still runs every defer.
//
// A Fleet builds the binaries once per process (Build), starts each with
// a free port in PORT on HOST=127.0.0.1 and a hermetic
// environment, waits until it answers, and captures its output to a log
// file per process, which survives restarts and is what a failing test
// prints. Package fleettest wraps it for tests.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config configures a Fleet. Every field is optional; a nil Config is the
// zero value.
type Config struct {
	// LogDir receives one log file per process. Default: a new temporary
	// directory (see Fleet.LogDir).
	LogDir string

	// Env is set in every process, as KEY=VALUE, before the process's own
	// settings: DATABASE_URL, STRIPE_API_KEY and the like.
	Env []string

	// Binaries to run. Default: Build().
	Binaries *Binaries
}

// Fleet starts and tracks processes built from the project's commands.
type Fleet struct {
	bins   *Binaries
	logDir string
	env    []string

	mu        sync.Mutex
	procs     []*Process
	instances map[string]int // per command, for naming api-1, api-2, ...
}

// New returns a Fleet, building the binaries first if config.Binaries is
// nil.
func New(config *Config) (*Fleet, error) {
	if config == nil {
		config = &Config{}
	}
	bins := config.Binaries
	if bins == nil {
		var err error
		if bins, err = Build(); err != nil {
			return nil, err
		}
	}
	logDir := config.LogDir
	if logDir == "" {
		var err error
		if logDir, err = os.MkdirTemp("", "rocketrides-logs-"); err != nil {
			return nil, fmt.Errorf("create log directory: %w", err)
		}
	} else if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("create log directory: %w", err)
	}
	return &Fleet{bins: bins, logDir: logDir, env: slices.Clone(config.Env), instances: map[string]int{}}, nil
}

// AddEnv adds env (KEY=VALUE) to the fleet's Env, for the processes
// started from now on: the Stripe fake's URL, say, once it runs.
func (f *Fleet) AddEnv(env ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.env = append(f.env, env...)
}

// Binaries are the executables the fleet runs.
func (f *Fleet) Binaries() *Binaries { return f.bins }

// LogDir is where the processes' logs are written.
func (f *Fleet) LogDir() string { return f.logDir }

// Has reports whether command name can be started.
func (f *Fleet) Has(name string) bool { return f.bins.Has(name) }

// Start runs command name (a folder under cmd/) as a new process with env
// (KEY=VALUE, overriding the fleet's Env) and waits until it is ready:
// the api answers GET /healthz, the Stripe fake GET /_fake/stats, the
// console GET /login, the bench's floor GET /healthz; other commands are
// ready once started. Every process gets a free loopback
// port in PORT, whether it serves HTTP or not, so that no two instances
// ever share one.
func (f *Fleet) Start(ctx context.Context, name string, env ...string) (*Process, error) {
	return f.StartArgs(ctx, name, nil, env...)
}

// StartArgs is Start with command-line arguments.
func (f *Fleet) StartArgs(ctx context.Context, name string, args []string, env ...string) (*Process, error) {
	p, err := f.newProcess(name, name, args, env)
	if err != nil {
		return nil, err
	}
	// Another process may take a free port between our probe and the
	// command's listen; only a first start picks a new one and tries again.
	for attempt := 1; attempt <= 3; attempt++ {
		if p.Port, err = FreePort(); err != nil {
			return nil, err
		}
		p.URL = "http://127.0.0.1:" + strconv.Itoa(p.Port)
		if err = p.launch(ctx); err == nil || !errors.Is(err, errPortTaken) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	return p, nil
}

// newProcess describes the next instance of command name, numbered in
// series (api-1, api-2, ...; api-run-1 for Run), with env over the
// fleet's.
func (f *Fleet) newProcess(name, series string, args, env []string) (*Process, error) {
	if err := f.bins.Err(name); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.instances[series]++
	instance := fmt.Sprintf("%s-%d", series, f.instances[series])
	baseEnv := slices.Clone(f.env)
	f.mu.Unlock()
	return &Process{
		Name:    instance,
		Command: name,
		LogPath: filepath.Join(f.logDir, instance+".log"),
		path:    f.bins.Path(name),
		args:    slices.Clone(args),
		env:     mergeEnv(baseEnv, env),
	}, nil
}

// Run runs command name to completion with args and env and returns what
// it printed on stdout (trimmed), for the -once modes of the background
// processes. Its stderr, and a copy of stdout, go to its log. A non-zero
// exit is an error carrying the end of the log.
func (f *Fleet) Run(ctx context.Context, name string, env []string, args ...string) (string, error) {
	p, err := f.newProcess(name, name+"-run", args, env)
	if err != nil {
		return "", err
	}
	if p.Port, err = FreePort(); err != nil {
		return "", err
	}
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	return p.run(ctx)
}

// Processes returns every process the fleet started, in start order.
func (f *Fleet) Processes() []*Process {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.procs)
}

// Stop stops every running process (SIGTERM, then SIGKILL for those still
// running when ctx ends), all at once.
func (f *Fleet) Stop(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, 0)
	var mu sync.Mutex
	for _, p := range f.Processes() {
		wg.Go(func() {
			if err := p.Stop(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Logs returns the last lines of every process's log, each under its
// name: what a failed test prints.
func (f *Fleet) Logs(lines int) string {
	var b strings.Builder
	for _, p := range f.Processes() {
		fmt.Fprintf(&b, "==== %s (%s) ====\n%s\n", p.Name, p.LogPath, p.LogTail(lines))
	}
	return b.String()
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on right
// now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// inherited are the only variables a process takes from ours: whatever
// else is set here (a developer's DATABASE_URL, FAILPOINTS, PORT) must not
// leak into a test's processes.
var inherited = []string{"PATH", "HOME", "TMPDIR", "TZ", "USER", "LANG", "LC_ALL"}

// mergeEnv builds a process environment from the inherited variables and
// the layers given, later layers winning. "KEY=" sets KEY empty, which the
// commands treat as unset.
func mergeEnv(layers ...[]string) []string {
	var order []string
	values := map[string]string{}
	set := func(kv string) {
		k, v, _ := strings.Cut(kv, "=")
		if _, seen := values[k]; !seen {
			order = append(order, k)
		}
		values[k] = v
	}
	for _, k := range inherited {
		if v, ok := os.LookupEnv(k); ok {
			set(k + "=" + v)
		}
	}
	for _, layer := range layers {
		for _, kv := range layer {
			set(kv)
		}
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+values[k])
	}
	return env
}

// readyPaths are the health endpoints of the commands that serve HTTP.
var readyPaths = map[string]string{
	"api":        "/healthz",
	"fakestripe": "/_fake/stats",
	"console":    "/login",
	"bench":      "/healthz", // started only as a server the api is measured against: bench -floor, bench -minimal-api
}

// readyTimeout bounds a start: a binary that is not serving by then is
// broken, not slow. It outlasts db.Preflight's own 30 s wait for the
// database, which a process started while Postgres restarts sits through.
const readyTimeout = time.Minute
