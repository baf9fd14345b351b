package localpg

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// configFile holds the settings this package manages. postgresql.conf
// includes it, so a server started by hand or by pg_ctl restart gets the
// same settings, and it is rewritten before every start so that a changed
// port takes effect.
const configFile = "localpg.conf"

// maxSocketPath is the longest unix socket path the kernel accepts
// (sizeof(sun_path) minus the terminating NUL).
const maxSocketPath = 107

// account is the unprivileged user the server runs as when we are root.
type account struct {
	name     string
	uid, gid uint32
}

func lookupAccount(name string) (*account, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("look up user %s to run postgres as (postgres refuses to run as root): %w", name, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse uid of user %s: %w", name, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse gid of user %s: %w", name, err)
	}
	if uid == 0 {
		return nil, fmt.Errorf("user %s is root: postgres needs an unprivileged user", name)
	}
	return &account{name: name, uid: uint32(uid), gid: uint32(gid)}, nil
}

// lock takes the exclusive lock that serialises everything that inspects or
// changes the cluster: without it, two test binaries starting at once
// would both see an empty data directory and both run initdb. The kernel
// drops a flock when its holder dies, so a killed process never leaves the
// cluster locked.
func (c Cluster) lock(ctx context.Context) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(c.lockFile), 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", filepath.Dir(c.lockFile), err)
	}
	f, err := os.OpenFile(c.lockFile, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	// Poll rather than block in flock so that a cancelled context (a test
	// timing out) stops the wait.
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", c.lockFile, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("wait for lock %s: %w", c.lockFile, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// prepare creates the data directory and the log file and, when we are
// root, hands both to the account the server runs as.
func (c Cluster) prepare() error {
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	logFile, err := os.OpenFile(c.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("create log file: %w", err)
	}
	if err := logFile.Close(); err != nil {
		return fmt.Errorf("create log file: %w", err)
	}
	if c.runAs == nil {
		return nil
	}
	if err := c.checkTraversable(); err != nil {
		return err
	}
	// pg_ctl opens the log file as the server's user.
	if err := os.Chown(c.LogFile, int(c.runAs.uid), int(c.runAs.gid)); err != nil {
		return fmt.Errorf("hand log file to %s: %w", c.runAs.name, err)
	}
	info, err := os.Stat(c.DataDir)
	if err != nil {
		return fmt.Errorf("stat data directory: %w", err)
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Uid == c.runAs.uid {
		return nil
	}
	// postgres refuses a data directory it does not own; hand over the
	// whole tree, which also repairs one initialised under another user.
	err = filepath.WalkDir(c.DataDir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(c.runAs.uid), int(c.runAs.gid))
	})
	if err != nil {
		return fmt.Errorf("hand data directory to %s: %w", c.runAs.name, err)
	}
	return nil
}

// checkTraversable fails early, naming the culprit, when the server's user
// cannot reach the data directory; postgres would otherwise only report a
// bare "permission denied".
func (c Cluster) checkTraversable() error {
	var ancestors []string
	for dir := filepath.Dir(c.DataDir); ; dir = filepath.Dir(dir) {
		ancestors = append(ancestors, dir)
		if filepath.Dir(dir) == dir {
			break
		}
	}
	// From the root down, so that the error names the outermost culprit:
	// fixing an inner one alone would not help.
	for _, dir := range slices.Backward(ancestors) {
		info, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("stat %s: %w", dir, err)
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if ok && !canTraverse(info.Mode().Perm(), st.Uid, st.Gid, c.runAs) {
			return fmt.Errorf("directory %s (mode %#o) cannot be traversed by user %s, which runs postgres because postgres refuses to run as root: "+
				"make it traversable (chmod o+x %s) or put the data directory elsewhere", dir, info.Mode().Perm(), c.runAs.name, dir)
		}
	}
	return nil
}

// canTraverse applies the owner/group/other execute bits the way the kernel
// does for a process with only its primary group (we drop supplementary
// groups when switching user).
func canTraverse(mode fs.FileMode, ownerUID, ownerGID uint32, a *account) bool {
	switch {
	case ownerUID == a.uid:
		return mode&0o100 != 0
	case ownerGID == a.gid:
		return mode&0o010 != 0
	default:
		return mode&0o001 != 0
	}
}

// Running reports whether the cluster's server is running: whether
// postmaster.pid names a live process that runs this cluster's postgres
// (postmasterPID). pg_ctl status would trust any live process with that
// pid, and after a crash the kernel may have handed it to another
// program, which pg_ctl stop would then signal.
func (c Cluster) Running(context.Context) (bool, error) {
	pid, err := c.postmasterPID()
	if err != nil {
		return false, fmt.Errorf("check whether postgres runs in %s: %w", c.DataDir, err)
	}
	return pid != 0, nil
}

// initdb initialises the data directory unless it already holds a cluster.
func (c Cluster) initdb(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(c.DataDir, "PG_VERSION")); err == nil {
		return nil
	}
	_, err := c.run(ctx, "initdb",
		"-D", c.DataDir,
		"-U", Superuser,
		// The cluster listens on loopback only and holds throwaway data:
		// trust spares every test and tool a password.
		"--auth=trust",
		"--encoding=UTF8",
		// The C locale sorts the same on every machine, so tests that
		// order text do not depend on the developer's locale.
		"--no-locale",
		"--no-instructions",
	)
	if err != nil {
		return fmt.Errorf("initialise cluster in %s: %w", c.DataDir, err)
	}
	return nil
}

// writeConfig writes the settings this package owns into configFile and
// makes sure postgresql.conf includes it.
func (c Cluster) writeConfig() error {
	socketDir := quoteConf(c.DataDir)
	if len(filepath.Join(c.DataDir, fmt.Sprintf(".s.PGSQL.%d", c.Port))) > maxSocketPath || strings.Contains(c.DataDir, ",") {
		// The socket path would be too long for the kernel (or the
		// directory name would split the list): TCP only then, which is
		// all the URLs use anyway.
		socketDir = "''"
	}
	conf := fmt.Sprintf(`# Written by internal/dev/localpg before every start; edits are overwritten.
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = %s
# Tests run in parallel, each with its own pools, and the benchmark opens
# many connections at once.
max_connections = 200
shared_buffers = %s
# Durability is part of what the project demonstrates: a committed
# recovery point must survive a crash, even on a development machine.
fsync = on
# Every DROP DATABASE (one per test) forces a checkpoint; logging each
# would bury what the log is read for.
log_checkpoints = off
# A session gone silent inside a transaction (a half-open link, a COMMIT
# whose answer never came back) would hold its key's row lock until TCP
# keepalive noticed, two hours by default. An atomic phase is a few
# statements under a 10s deadline; past 15s idle, it is ended.
idle_in_transaction_session_timeout = '15s'
`, c.Port, socketDir, quoteConf(c.sharedBuffers))
	path := filepath.Join(c.DataDir, configFile)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if c.runAs != nil {
		if err := os.Chown(path, int(c.runAs.uid), int(c.runAs.gid)); err != nil {
			return fmt.Errorf("hand %s to %s: %w", path, c.runAs.name, err)
		}
	}

	mainConf := filepath.Join(c.DataDir, "postgresql.conf")
	existing, err := os.ReadFile(mainConf)
	if err != nil {
		return fmt.Errorf("read %s: %w", mainConf, err)
	}
	include := fmt.Sprintf("include_if_exists = '%s'", configFile)
	if bytes.Contains(existing, []byte(include)) {
		return nil
	}
	f, err := os.OpenFile(mainConf, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", mainConf, err)
	}
	// Last in the file, so that these settings win over initdb's.
	if _, err := fmt.Fprintf(f, "\n# Settings managed by internal/dev/localpg.\n%s\n", include); err != nil {
		_ = f.Close()
		return fmt.Errorf("append to %s: %w", mainConf, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("append to %s: %w", mainConf, err)
	}
	return nil
}

func quoteConf(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// pgCtl runs pg_ctl subcommand on the cluster's data directory.
func (c Cluster) pgCtl(ctx context.Context, subcommand string, args ...string) (string, error) {
	return c.run(ctx, "pg_ctl", append([]string{subcommand, "-D", c.DataDir}, args...)...)
}

// run runs one of the server binaries, as the unprivileged account when we
// are root, and returns its output. A failure's error carries the output.
func (c Cluster) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, name), args...)
	// The working directory may be one the server's user cannot enter
	// (root's home); "/" always can be.
	cmd.Dir = "/"
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	// pg_ctl hands the server /dev/null and the log file, never our
	// pipes; should that ever change, do not wait forever for them.
	cmd.WaitDelay = 5 * time.Second
	if c.runAs != nil {
		// syscall.Credential rather than runuser or su: no dependency on
		// util-linux, and an empty Groups drops root's supplementary groups.
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: c.runAs.uid, Gid: c.runAs.gid}}
	}
	err := cmd.Run()
	output := strings.TrimSpace(out.String())
	if err != nil {
		what := name
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			what += " " + args[0] // the pg_ctl subcommand
		}
		if output != "" {
			return output, fmt.Errorf("%s: %w: %s", what, err, output)
		}
		return output, fmt.Errorf("%s: %w", what, err)
	}
	return output, nil
}

// logTail returns the end of the server log, formatted to follow an error:
// why a server did not start is written there, not on pg_ctl's output.
func (c Cluster) logTail() string {
	data, err := os.ReadFile(c.LogFile)
	if err != nil || len(data) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	lines = lines[max(0, len(lines)-15):]
	return fmt.Sprintf("\nlast lines of %s:\n%s", c.LogFile, strings.Join(lines, "\n"))
}

// libDir is where Debian and Ubuntu install each PostgreSQL major version.
const libDir = "/usr/lib/postgresql"

// findBinDir locates initdb, pg_ctl and postgres: the ones on PATH first,
// then the highest version under /usr/lib/postgresql, which Debian keeps
// off PATH.
func findBinDir(dataDir string) (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		// Resolve symlinks: PATH often holds links to the real directory,
		// and pg_ctl finds postgres next to its real self.
		if real, err := filepath.EvalSymlinks(p); err == nil && hasServer(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
	}
	dirs, err := filepath.Glob(filepath.Join(libDir, "*", "bin"))
	if err != nil {
		return "", fmt.Errorf("look for postgres binaries: %w", err)
	}
	dirs = slices.DeleteFunc(dirs, func(d string) bool { return !hasServer(d) })
	if len(dirs) == 0 {
		return "", errors.New("no PostgreSQL server binaries (initdb, pg_ctl, postgres) on PATH or under " + libDir +
			"/*/bin: install them (Debian: apt-get install postgresql) or set Options.BinDir")
	}
	// A cluster only starts under the major version that created it, so
	// an existing one picks its own version when that is installed.
	if v, err := os.ReadFile(filepath.Join(dataDir, "PG_VERSION")); err == nil {
		own := filepath.Join(libDir, strings.TrimSpace(string(v)), "bin")
		if slices.Contains(dirs, own) {
			return own, nil
		}
	}
	return highestVersion(dirs), nil
}

func hasServer(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		if info, err := os.Stat(filepath.Join(dir, name)); err != nil || info.IsDir() {
			return false
		}
	}
	return true
}

// highestVersion picks the directory .../<version>/bin with the highest
// version, comparing numerically so that 10 beats 9.6.
func highestVersion(binDirs []string) string {
	return slices.MaxFunc(binDirs, func(a, b string) int {
		va := strings.Split(filepath.Base(filepath.Dir(a)), ".")
		vb := strings.Split(filepath.Base(filepath.Dir(b)), ".")
		for i := range max(len(va), len(vb)) {
			if c := cmp.Compare(versionPart(va, i), versionPart(vb, i)); c != 0 {
				return c
			}
		}
		return 0
	})
}

func versionPart(parts []string, i int) int {
	if i >= len(parts) {
		return 0
	}
	n, err := strconv.Atoi(parts[i])
	if err != nil {
		return -1 // not a version directory: rank it last
	}
	return n
}
