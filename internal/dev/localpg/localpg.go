// Package localpg runs a project-local PostgreSQL cluster for development
// and tests. The cluster lives under the git-ignored .data/ folder, listens
// on its own loopback port and is left running when the process exits, so
// that the next test run or `make dev` reuses it. A checkout needs nothing
// but the PostgreSQL server binaries: no system service, no Docker, no
// credentials.
package localpg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rocketrides/rocketrides/internal/platform/config"
	_ "github.com/rocketrides/rocketrides/internal/platform/db" // declares DATABASE_URL, read by DatabaseURL
	"github.com/rocketrides/rocketrides/internal/platform/project"
)

const (
	// DefaultPort is the cluster's TCP port on 127.0.0.1. It is not 5432 so
	// that the cluster can run next to a system PostgreSQL.
	DefaultPort = 54329

	// Superuser is the role initdb creates; it connects without a password.
	Superuser = "postgres"

	// defaultUser runs the server when this process is root, because
	// initdb and postgres refuse to run as root.
	defaultUser = "nobody"

	// startTimeout bounds pg_ctl's wait for the server to accept
	// connections (crash recovery after an unclean stop can take a while).
	startTimeout = 60 * time.Second
)

// Options configure a cluster. The zero value is the project's cluster.
type Options struct {
	// DataDir is the cluster's data directory. Default: .data/postgres in
	// the project root, the nearest directory above the working directory
	// that holds go.mod, so that every package's tests find the same one.
	DataDir string

	// Port is the TCP port on 127.0.0.1. Default: $LOCALPG_PORT, else
	// DefaultPort.
	Port int

	// BinDir holds initdb, pg_ctl and postgres. Default: the directory of
	// pg_ctl on PATH, otherwise the highest version under
	// /usr/lib/postgresql/*/bin.
	BinDir string

	// User is the account the server runs as when this process is root.
	// Default: nobody.
	User string

	// SharedBuffers is the server's shared_buffers, such as "1GB". It
	// takes effect when the server starts. Default: 128MB, Postgres's own
	// default, enough for tests and a development stack.
	SharedBuffers string
}

// Cluster is a local PostgreSQL cluster: where it lives and how to reach
// it. Its methods are safe to call from several processes at once; they
// serialise on a lock file next to the data directory.
type Cluster struct {
	// DataDir is the data directory. The unix socket is created in it too,
	// so the cluster does not depend on /var/run/postgresql.
	DataDir string
	// Port is the TCP port on 127.0.0.1 (on Host when set).
	Port int
	// BinDir holds the server binaries in use.
	BinDir string
	// LogFile receives the server's log (<DataDir>.log).
	LogFile string
	// Host is the loopback address a node of a replicated cluster listens
	// on (haHost); empty for 127.0.0.1.
	Host string

	lockFile      string
	runAs         *account // nil unless this process is root
	sharedBuffers string
}

// New resolves opts into a Cluster without initialising or starting
// anything, for commands such as stop and status that must not start a
// server as a side effect.
func New(opts Options) (Cluster, error) {
	dataDir := opts.DataDir
	if dataDir == "" {
		root, err := project.Root()
		if err != nil {
			return Cluster{}, fmt.Errorf("%w; set Options.DataDir", err)
		}
		dataDir = filepath.Join(root, ".data", "postgres")
	}
	dataDir, err := filepath.Abs(dataDir)
	if err != nil {
		return Cluster{}, fmt.Errorf("resolve data directory %s: %w", dataDir, err)
	}
	port := opts.Port
	if port == 0 {
		// Two checkouts on one machine each need a port of their own. Zero
		// is refused: the next run has to find the cluster again.
		var env config.Env
		port = env.Int("LOCALPG_PORT", DefaultPort)
		if err := env.Err(); err != nil {
			return Cluster{}, err
		}
		if port > 65535 {
			return Cluster{}, fmt.Errorf("LOCALPG_PORT=%d: must be a port number from 1 to 65535", port)
		}
	}
	binDir := opts.BinDir
	if binDir == "" {
		if binDir, err = findBinDir(dataDir); err != nil {
			return Cluster{}, err
		}
	}
	c := Cluster{
		DataDir:       dataDir,
		Port:          port,
		BinDir:        binDir,
		LogFile:       dataDir + ".log",
		lockFile:      dataDir + ".lock",
		sharedBuffers: cmp.Or(opts.SharedBuffers, "128MB"),
	}
	if os.Geteuid() == 0 {
		name := opts.User
		if name == "" {
			// nobody rather than a dedicated account: creating users would
			// change the machine's /etc/passwd from a test helper, and the
			// cluster trusts every local connection anyway, so sharing the
			// uid with other unprivileged daemons exposes nothing more.
			name = defaultUser
		}
		if c.runAs, err = lookupAccount(name); err != nil {
			return Cluster{}, err
		}
	}
	return c, nil
}

// Ensure returns the cluster described by opts, initialising its data
// directory and starting its server if needed, or reusing the server that
// is already running.
func Ensure(ctx context.Context, opts Options) (Cluster, error) {
	c, err := New(opts)
	if err != nil {
		return Cluster{}, err
	}
	if err := c.Start(ctx); err != nil {
		return Cluster{}, err
	}
	return c, nil
}

// DatabaseURL returns $DATABASE_URL when it is set; one that is no
// connection string is refused, naming it. Otherwise it ensures the
// project's cluster is running, creates database name in it if missing and
// returns that database's URL.
func DatabaseURL(ctx context.Context, name string) (string, error) {
	var env config.Env
	u := env.String("DATABASE_URL", "")
	if err := env.Err(); err != nil {
		return "", err
	}
	if u != "" {
		return u, nil
	}
	c, err := Ensure(ctx, Options{})
	if err != nil {
		return "", err
	}
	if err := c.CreateDatabase(ctx, name); err != nil {
		return "", err
	}
	return c.DatabaseURL(name), nil
}

// URL is the address of the cluster's maintenance database, postgres.
func (c Cluster) URL() string {
	return c.DatabaseURL("postgres")
}

// DatabaseURL is the address of database name in the cluster.
func (c Cluster) DatabaseURL(name string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(Superuser),
		Host:     fmt.Sprintf("%s:%d", cmp.Or(c.Host, "127.0.0.1"), c.Port),
		Path:     "/" + name,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Start initialises the data directory if it is empty and starts the server
// unless it is already running. Concurrent callers, in this process or in
// others (go test runs package binaries in parallel), wait for each other,
// so exactly one of them initialises and starts the cluster.
func (c Cluster) Start(ctx context.Context) error {
	unlock, err := c.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	return c.start(ctx)
}

func (c Cluster) start(ctx context.Context) error {
	if err := c.prepare(); err != nil {
		return err
	}
	running, err := c.Running(ctx)
	if err != nil {
		return err
	}
	if running {
		return c.checkRunningPort()
	}
	if reuse, err := c.servedOnPort(ctx); err != nil || reuse {
		return err
	}
	if err := c.initdb(ctx); err != nil {
		return err
	}
	if err := c.writeConfig(); err != nil {
		return err
	}
	if err := c.launch(ctx); err != nil {
		return fmt.Errorf("start postgres in %s: %w%s", c.DataDir, err, c.logTail())
	}
	return nil
}

// launch starts the postmaster as a child of this process (child.go says
// why not through pg_ctl start) and waits, as pg_ctl -w would, until its
// pid file says it is ready: "ready" for a primary, "standby" for a hot
// standby that has reached a consistent state.
func (c Cluster) launch(ctx context.Context) error {
	pid, ch, err := spawn(filepath.Join(c.BinDir, "postgres"), []string{"-D", c.DataDir}, c.LogFile, c.runAs, nil)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(startTimeout)
	for {
		if status := c.postmasterStatus(pid); status == "ready" || status == "standby" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres %d is not ready after %s", pid, startTimeout)
		}
		select {
		case <-ch.exited:
			return fmt.Errorf("postgres exited while starting: %w", ch.err)
		case <-ctx.Done():
			return fmt.Errorf("wait for postgres %d to be ready: %w", pid, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// postmasterStatus is the status line (the eighth) of postmaster.pid if
// the file is postmaster pid's, and "" otherwise: the server writes the
// file in steps, and a stale one names a dead server.
func (c Cluster) postmasterStatus(pid int) string {
	b, err := os.ReadFile(filepath.Join(c.DataDir, "postmaster.pid"))
	if err != nil {
		return ""
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 8 || strings.TrimSpace(lines[0]) != strconv.Itoa(pid) {
		return ""
	}
	return strings.TrimSpace(lines[7])
}

// Stop shuts the server down (fast mode: open transactions are rolled
// back). Stopping a cluster that is not running is not an error.
func (c Cluster) Stop(ctx context.Context) error {
	unlock, err := c.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	return c.stop(ctx)
}

func (c Cluster) stop(ctx context.Context) error {
	pid, err := c.postmasterPID()
	if err != nil || pid == 0 {
		return err
	}
	// pg_ctl stop returns once the server has removed its pid file, which
	// it does last. A server of ours is then reaped at once; another
	// one's zombie holds nothing a new server would trip over.
	if _, err := c.pgCtl(ctx, "stop", "-w", "-m", "fast"); err != nil {
		return fmt.Errorf("stop postgres in %s: %w", c.DataDir, err)
	}
	if ch, ok := ownChild(pid); ok {
		select {
		case <-ch.exited:
		case <-ctx.Done():
			return fmt.Errorf("wait for postgres %d to exit: %w", pid, ctx.Err())
		}
	}
	return nil
}

// Restart stops the server in fast mode, cutting every connection, and
// starts it again; it starts a stopped cluster. Tests use it to show that
// what was committed survives a database restart and that clients recover.
func (c Cluster) Restart(ctx context.Context) error {
	unlock, err := c.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if err := c.stop(ctx); err != nil {
		return err
	}
	return c.start(ctx)
}

// CreateDatabase creates database name unless it exists. Concurrent calls
// for the same name are safe: the losers see the winner's database.
func (c Cluster) CreateDatabase(ctx context.Context, name string) error {
	return createDatabase(ctx, c.URL(), name)
}

// createDatabase creates database name, unless it exists, in the server
// that connURL reaches.
func createDatabase(ctx context.Context, connURL, name string) error {
	conn, err := connect(ctx, connURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	// 42P04: created meanwhile by another caller. 23505: the same race
	// lost one step later, on pg_database's unique index.
	if errors.As(err, &pgErr) && (pgErr.Code == "42P04" || pgErr.Code == "23505") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// checkRunningPort refuses a running cluster that listens elsewhere than
// asked: its URL would point at nothing (or at another server).
func (c Cluster) checkRunningPort() error {
	pid, err := os.ReadFile(filepath.Join(c.DataDir, "postmaster.pid"))
	if err != nil {
		return fmt.Errorf("read postmaster.pid of running cluster: %w", err)
	}
	// Line 4 of postmaster.pid is the port.
	lines := strings.Split(string(pid), "\n")
	if len(lines) < 4 {
		return nil // a server still writing its pid file; Running found it runs
	}
	if port, err := strconv.Atoi(strings.TrimSpace(lines[3])); err == nil && port != c.Port {
		return fmt.Errorf("cluster in %s is running on port %d, not %d: stop it first (go run ./cmd/localpg stop)", c.DataDir, port, c.Port)
	}
	return nil
}

// servedOnPort looks for a server that Running did not find (its pid
// file is unreadable or gone) on the port. If it serves this data
// directory, it is reused; if it serves another, starting ours would fail
// on the port, so the error says which one it is.
func (c Cluster) servedOnPort(ctx context.Context) (reuse bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := connect(ctx, c.URL())
	if err != nil {
		return false, nil // nothing usable listens: ours can start
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var dir string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dir); err != nil {
		return false, fmt.Errorf("port %d is taken by a server that does not tell its data directory: %w", c.Port, err)
	}
	if sameFile(dir, c.DataDir) {
		return true, nil
	}
	return false, fmt.Errorf("port %d is taken by another PostgreSQL cluster (data directory %s): stop it or choose another port", c.Port, dir)
}

func sameFile(a, b string) bool {
	ia, errA := os.Stat(a)
	ib, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(ia, ib)
}

func connect(ctx context.Context, connURL string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(connURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	cfg.ConnectTimeout = 5 * time.Second
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s:%d: %w", cfg.Host, cfg.Port, err)
	}
	return conn, nil
}
