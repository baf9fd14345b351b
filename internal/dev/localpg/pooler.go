package localpg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rocketrides/rocketrides/internal/platform/project"
)

// PoolerOptions configure a PgBouncer in front of a cluster. The zero
// value is the project's pooler: transaction mode, under .data/pgbouncer,
// on LOCALPG_PORT+3, in front of the project's cluster.
type PoolerOptions struct {
	// Dir holds pgbouncer.ini, userlist.txt, the log and the pid file.
	// Default: .data/pgbouncer in the project root.
	Dir string
	// Port is PgBouncer's port on 127.0.0.1. Default: LOCALPG_PORT+3.
	Port int
	// UpstreamPort is the Postgres server's port on 127.0.0.1. Default:
	// the project's cluster's.
	UpstreamPort int
	// PoolMode is PgBouncer's pool_mode. Default: transaction, the mode
	// that lets many clients share few server connections and the one the
	// project supports; statement exists to show the refusal.
	PoolMode string
	// User runs pgbouncer when this process is root (it refuses to run as
	// root). Default: nobody.
	User string
}

// Pooler is a PgBouncer started by this package. Like the cluster, it
// outlives the process that started it.
type Pooler struct {
	Dir          string
	Port         int
	UpstreamPort int
	PoolMode     string
	// PoolSize is default_pool_size, the server connections per database
	// and user.
	PoolSize int

	iniFile, logFile, pidFile string // under Dir
	bin                       string // the pgbouncer binary
	runAs                     *account
}

// poolSize is every pooler's default_pool_size. Nothing has needed
// another yet; the bench names it beside its figures.
const poolSize = 20

// NewPooler resolves opts without starting anything.
func NewPooler(opts PoolerOptions) (*Pooler, error) {
	dir := opts.Dir
	if dir == "" {
		root, err := project.Root()
		if err != nil {
			return nil, fmt.Errorf("%w; set PoolerOptions.Dir", err)
		}
		dir = filepath.Join(root, ".data", "pgbouncer")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", dir, err)
	}
	bin, err := pgbouncerBinary()
	if err != nil {
		return nil, err
	}
	p := &Pooler{
		Dir:          dir,
		Port:         opts.Port,
		UpstreamPort: opts.UpstreamPort,
		PoolMode:     cmp.Or(opts.PoolMode, "transaction"),
		PoolSize:     poolSize,
		iniFile:      filepath.Join(dir, "pgbouncer.ini"),
		logFile:      filepath.Join(dir, "pgbouncer.log"),
		pidFile:      filepath.Join(dir, "pgbouncer.pid"),
		bin:          bin,
	}
	if p.Port == 0 {
		if p.Port, err = PortAbove(3); err != nil {
			return nil, err
		}
	}
	if p.UpstreamPort == 0 {
		c, err := New(Options{})
		if err != nil {
			return nil, err
		}
		p.UpstreamPort = c.Port
	}
	if os.Geteuid() == 0 {
		if p.runAs, err = lookupAccount(cmp.Or(opts.User, defaultUser)); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// DatabaseURL is the address of database name through the pooler.
func (p *Pooler) DatabaseURL(name string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(Superuser),
		Host:     fmt.Sprintf("127.0.0.1:%d", p.Port),
		Path:     "/" + name,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Start writes the configuration and starts pgbouncer unless it runs.
func (p *Pooler) Start(ctx context.Context) error {
	if p.pid() != 0 {
		return nil
	}
	if err := p.writeConfig(); err != nil {
		return err
	}
	// A child of ours, not pgbouncer -d, for the reason child.go gives:
	// pgbouncer refuses to start while its pid file names a zombie.
	_, ch, err := spawn(p.bin, []string{p.iniFile}, p.logFile, p.runAs, nil)
	if err != nil {
		return fmt.Errorf("start pgbouncer: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p.Port), time.Second)
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgbouncer does not listen on port %d: %w%s", p.Port, err, p.logTail())
		}
		select {
		case <-ch.exited:
			return fmt.Errorf("pgbouncer exited while starting: %w%s", ch.err, p.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Running reports whether pgbouncer runs.
func (p *Pooler) Running() bool { return p.pid() != 0 }

// Stop stops pgbouncer at once (SIGTERM: every client disconnected).
// Stopping a pooler that is not running is not an error.
func (p *Pooler) Stop(ctx context.Context) error {
	pid := p.pid()
	if pid == 0 {
		return nil
	}
	start, _ := startTime(pid)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop pgbouncer %d: %w", pid, err)
	}
	// Gone from the process table, not only dead: a pgbouncer started
	// next would take a zombie's pid for a live pooler's.
	return awaitGone(ctx, pid, start, "pgbouncer")
}

// pid is pgbouncer's from its pid file; zero when it is not running,
// including when the file is stale (pgbouncer was killed) and its pid
// now belongs to another process.
func (p *Pooler) pid() int {
	b, err := os.ReadFile(p.pidFile)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !runsBinary(pid, p.bin) {
		return 0
	}
	return pid
}

// writeConfig writes pgbouncer.ini and userlist.txt. Every database name
// is passed through to the upstream server ("*"), so the per-test and
// per-soak databases need no entry of their own.
func (p *Pooler) writeConfig() error {
	if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", p.Dir, err)
	}
	userlist := filepath.Join(p.Dir, "userlist.txt")
	ini := fmt.Sprintf(`; Written by internal/dev/localpg before every start; edits are overwritten.
[databases]
* = host=127.0.0.1 port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
; The upstream cluster trusts loopback; the user must still be listed.
auth_type = trust
auth_file = %s
; transaction: a server connection is a client's only for the length of a
; transaction. Session state (named prepared statements, LISTEN, SET)
; does not survive from one transaction to the next.
pool_mode = %s
default_pool_size = %d
max_client_conn = 2000
; pgx and psql send it; PgBouncer would refuse the connection otherwise.
ignore_startup_parameters = extra_float_digits
; Retry a server that refused a login (it was restarting) after a
; second, not the default 15.
server_login_retry = 1
admin_users = %s
; No logfile: pgbouncer runs in the foreground as our child, and its
; stderr is appended to pgbouncer.log.
pidfile = %s
`, p.UpstreamPort, p.Port, userlist, p.PoolMode, p.PoolSize, Superuser, p.pidFile)
	files := map[string]string{p.iniFile: ini, userlist: fmt.Sprintf("%q \"\"\n", Superuser)}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	if p.runAs != nil {
		for _, path := range []string{p.Dir, p.iniFile, userlist} {
			if err := os.Chown(path, int(p.runAs.uid), int(p.runAs.gid)); err != nil {
				return fmt.Errorf("hand %s to %s: %w", path, p.runAs.name, err)
			}
		}
		if f, err := os.OpenFile(p.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			_ = f.Close()
			_ = os.Chown(p.logFile, int(p.runAs.uid), int(p.runAs.gid))
		}
	}
	return nil
}

func (p *Pooler) logTail() string {
	c := Cluster{LogFile: p.logFile}
	return c.logTail()
}

// pgbouncerBinary finds pgbouncer on PATH or where Debian installs it.
func pgbouncerBinary() (string, error) {
	if path, err := exec.LookPath("pgbouncer"); err == nil {
		return path, nil
	}
	const debian = "/usr/sbin/pgbouncer"
	if _, err := os.Stat(debian); err == nil {
		return debian, nil
	}
	return "", errors.New("no pgbouncer on PATH or in /usr/sbin: install it (Debian: apt-get install pgbouncer)")
}
