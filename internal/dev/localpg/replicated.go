package localpg

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/project"
)

// ReplicatedOptions configure a replicated pair. The zero value is the
// project's pair: synchronous, under .data/replicated, on the ports after
// LOCALPG_PORT.
type ReplicatedOptions struct {
	// Dir holds the nodes' data directories, node-a and node-b, and the
	// file that says which of them is the primary. Default:
	// .data/replicated in the project root.
	Dir string
	// Ports of node-a and node-b on 127.0.0.1, both or neither. Default:
	// LOCALPG_PORT+1 and LOCALPG_PORT+2 (DefaultPort+1 and +2 without it).
	Ports [2]int
	// Async makes a new pair's standby asynchronous: the primary
	// acknowledges a commit before the standby has it, so a failover
	// loses the commits still in flight. Default: synchronous
	// (synchronous_standby_names = '*', synchronous_commit = on), where a
	// commit returns only once the standby has flushed it.
	//
	// A pair keeps the mode it was created with, saved in Dir: without
	// Async an existing pair runs in its own mode, and Async on a
	// synchronous pair is refused. To change the mode, stop the pair and
	// remove Dir.
	Async bool
	// BinDir and User as in Options.
	BinDir string
	User   string
}

// Replicated is a primary and a streaming standby, each a Cluster of its
// own, for the failover drill and for trying a failover by hand. Which
// node is the primary is kept in a file next to them, so that a promote
// survives the process that made it.
type Replicated struct {
	// Nodes are node-a and node-b.
	Nodes [2]Cluster
	// Async is the replication mode the nodes are configured with: the
	// one the pair was created with.
	Async bool

	dir      string
	lockFile string
}

// primaryFile names the node (a or b) that is the primary.
const primaryFile = "primary"

// modeFile holds the replication mode the pair was created with, sync or
// async: every later command (url, rebuild) must configure the nodes and
// wait for the standby the same way, whatever it is asked.
const modeFile = "replication"

// NewReplicated resolves opts into a pair without starting anything.
func NewReplicated(opts ReplicatedOptions) (*Replicated, error) {
	dir := opts.Dir
	if dir == "" {
		root, err := project.Root()
		if err != nil {
			return nil, fmt.Errorf("%w; set ReplicatedOptions.Dir", err)
		}
		dir = filepath.Join(root, ".data", "replicated")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", dir, err)
	}
	ports := opts.Ports
	if (ports[0] == 0) != (ports[1] == 0) {
		// Half the defaults would put the two nodes on ports nobody chose
		// together, one of them maybe the other's.
		return nil, fmt.Errorf("ReplicatedOptions.Ports %v: set both ports or neither", ports)
	}
	if ports[0] == 0 {
		for i := range ports {
			if ports[i], err = PortAbove(i + 1); err != nil {
				return nil, err
			}
		}
	}
	r := &Replicated{Async: opts.Async, dir: dir, lockFile: filepath.Join(dir, "replicated.lock")}
	saved, found, err := r.savedMode()
	if err != nil {
		return nil, err
	}
	if found {
		if err := r.checkMode(saved); err != nil {
			return nil, err
		}
		r.Async = saved
	}
	for i, name := range nodeDirs {
		c, err := New(Options{DataDir: filepath.Join(dir, name), Port: ports[i], BinDir: opts.BinDir, User: opts.User})
		if err != nil {
			return nil, err
		}
		c.extraConf = replicationConf(r.Async)
		r.Nodes[i] = c
	}
	return r, nil
}

// savedMode reads modeFile: whether the pair in r.dir was created
// asynchronous, and whether it was created at all.
func (r *Replicated) savedMode() (async, found bool, err error) {
	if !r.created() {
		// A start that failed before it created a node (its port taken,
		// say) recorded the mode of a pair that does not exist.
		return false, false, nil
	}
	path := filepath.Join(r.dir, modeFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("read the pair's replication mode: %w", err)
	}
	switch mode := strings.TrimSpace(string(b)); mode {
	case "sync":
		return false, true, nil
	case "async":
		return true, true, nil
	default:
		return false, false, fmt.Errorf("%s says %q: want sync or async", path, mode)
	}
}

// checkMode refuses an asynchronous pair asked of a synchronous one.
// Asking nothing (Async false) takes the pair as it is.
func (r *Replicated) checkMode(savedAsync bool) error {
	if r.Async && !savedAsync {
		return r.modeConflict(savedAsync)
	}
	return nil
}

func (r *Replicated) modeConflict(savedAsync bool) error {
	return fmt.Errorf("the pair in %s was created with %s replication, not %s: to change its mode, stop it and remove %s",
		r.dir, modeName(savedAsync), modeName(r.Async), r.dir)
}

// nodeDirs are the directories of the pair's two nodes, under its own.
var nodeDirs = [2]string{"node-a", "node-b"}

// created reports whether either node has been initialised.
func (r *Replicated) created() bool {
	for _, name := range nodeDirs {
		if _, err := os.Stat(filepath.Join(r.dir, name, "PG_VERSION")); err == nil {
			return true
		}
	}
	return false
}

// saveMode records the pair's mode when the pair is created. It runs
// under the pair's lock, so that of two processes creating the pair at
// once in different modes, the second is refused.
func (r *Replicated) saveMode() error {
	saved, found, err := r.savedMode()
	if err != nil {
		return err
	}
	if found {
		if saved != r.Async {
			return r.modeConflict(saved)
		}
		return nil
	}
	// The pair's lock file is in r.dir: it exists.
	if err := os.WriteFile(filepath.Join(r.dir, modeFile), []byte(modeName(r.Async)+"\n"), 0o644); err != nil {
		return fmt.Errorf("record the pair's replication mode: %w", err)
	}
	return nil
}

// PortAbove is the port n above the project cluster's ($LOCALPG_PORT,
// else DefaultPort). The replicated pair takes +1 and +2, the pooler +3
// and the bench's cluster +10, so that a checkout that moves LOCALPG_PORT
// moves them all and two checkouts on one machine do not collide.
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

// modeName is how modeFile and the messages name a mode.
func modeName(async bool) string {
	if async {
		return "async"
	}
	return "sync"
}

// replicationConf is what both nodes carry, so that either can be the
// primary. wal_keep_size lets a standby stalled for a while catch up
// without a rebuild.
func replicationConf(async bool) string {
	names := "'*'"
	comment := "# Synchronous: a commit returns once a standby has flushed it, so a\n# failover loses nothing that was acknowledged.\n"
	if async {
		names = "''"
		comment = "# Asynchronous: a commit returns before any standby has it; a failover\n# loses the commits still in flight.\n"
	}
	return `# A node of a replicated pair (localpg.Replicated).
wal_level = replica
max_wal_senders = 10
hot_standby = on
wal_keep_size = '256MB'
` + comment + "synchronous_standby_names = " + names + "\nsynchronous_commit = on\n"
}

// EnsureReplicated starts the pair described by opts (see Start).
func EnsureReplicated(ctx context.Context, opts ReplicatedOptions) (*Replicated, error) {
	r, err := NewReplicated(opts)
	if err != nil {
		return nil, err
	}
	if err := r.Start(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// Start initialises and starts the primary, then builds the standby from
// it with pg_basebackup unless it exists, and starts it. A node that is
// not the primary and is not a standby either (the old primary after a
// failover) is rebuilt.
func (r *Replicated) Start(ctx context.Context) error {
	unlock, err := r.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if err := r.saveMode(); err != nil {
		return err
	}
	primary, standby := r.roles()
	if err := primary.Start(ctx); err != nil {
		return fmt.Errorf("start primary: %w", err)
	}
	if _, err := os.Stat(filepath.Join(standby.DataDir, "standby.signal")); err != nil {
		return r.rebuild(ctx)
	}
	if err := standby.Start(ctx); err != nil {
		return fmt.Errorf("start standby: %w", err)
	}
	return waitStreaming(ctx, primary, standby, r.Async)
}

// Primary is the node that takes writes (once started).
func (r *Replicated) Primary() Cluster {
	primary, _ := r.roles()
	return primary
}

// Standby is the node that follows the primary.
func (r *Replicated) Standby() Cluster {
	_, standby := r.roles()
	return standby
}

func (r *Replicated) roles() (primary, standby Cluster) {
	b, err := os.ReadFile(filepath.Join(r.dir, primaryFile))
	if err == nil && strings.TrimSpace(string(b)) == "b" {
		return r.Nodes[1], r.Nodes[0]
	}
	return r.Nodes[0], r.Nodes[1]
}

// DatabaseURL is a multi-host URL of database name listing both nodes
// with target_session_attrs=read-write: libpq and pgx try each host and
// keep the one that takes writes, so a client reaches whichever node is
// the primary, before and after a failover, without being reconfigured.
func (r *Replicated) DatabaseURL(name string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(Superuser),
		Host:     fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", r.Nodes[0].Port, r.Nodes[1].Port),
		Path:     "/" + name,
		RawQuery: "sslmode=disable&target_session_attrs=read-write",
	}
	return u.String()
}

// CreateDatabase creates database name on the primary; the standby gets
// it through replication.
func (r *Replicated) CreateDatabase(ctx context.Context, name string) error {
	return r.Primary().CreateDatabase(ctx, name)
}

// Promote makes the standby the primary (pg_ctl promote) and records it.
// The old primary is expected to be dead: two primaries would each take
// writes the other never sees. Call Rebuild afterwards to get a standby
// again; until then a synchronous primary's commits wait for one.
func (r *Replicated) Promote(ctx context.Context) error {
	unlock, err := r.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	primary, standby := r.roles()
	running, err := primary.Running(ctx)
	if err != nil {
		return err
	}
	if running {
		return fmt.Errorf("primary in %s is still running: stop or crash it before promoting the standby", primary.DataDir)
	}
	if _, err := standby.pgCtl(ctx, "promote", "-w", "-t", strconv.Itoa(int(startTimeout.Seconds()))); err != nil {
		return fmt.Errorf("promote standby in %s: %w%s", standby.DataDir, err, standby.logTail())
	}
	name := "a"
	if standby.DataDir == r.Nodes[1].DataDir {
		name = "b"
	}
	if err := os.WriteFile(filepath.Join(r.dir, primaryFile), []byte(name+"\n"), 0o644); err != nil {
		return fmt.Errorf("record the new primary: %w", err)
	}
	return nil
}

// Rebuild throws the standby node's data away and copies it afresh from
// the primary with pg_basebackup, then starts it as a standby: how the
// old primary rejoins after a failover, so that a drill can fail over
// again.
func (r *Replicated) Rebuild(ctx context.Context) error {
	unlock, err := r.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	return r.rebuild(ctx)
}

func (r *Replicated) rebuild(ctx context.Context) error {
	primary, standby := r.roles()
	if err := standby.Crash(); err != nil {
		return err
	}
	if err := os.RemoveAll(standby.DataDir); err != nil {
		return fmt.Errorf("remove old standby data in %s: %w", standby.DataDir, err)
	}
	if err := standby.prepare(); err != nil {
		return err
	}
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=%s application_name=standby", primary.Port, Superuser)
	if _, err := standby.run(ctx, "pg_basebackup", "-D", standby.DataDir, "-d", conninfo,
		"-X", "stream", "-c", "fast", "-R"); err != nil {
		return fmt.Errorf("copy the primary into %s: %w", standby.DataDir, err)
	}
	if err := standby.Start(ctx); err != nil {
		return fmt.Errorf("start standby: %w", err)
	}
	return waitStreaming(ctx, primary, standby, r.Async)
}

// waitStreaming waits until standby streams from primary: until then a
// synchronous primary's commits wait, and an asynchronous one has nobody
// to fail over to. A standby that exits meanwhile fails the wait at once,
// with the end of its log.
func waitStreaming(ctx context.Context, primary, standby Cluster, async bool) error {
	var exited <-chan struct{}
	if pid, err := standby.postmasterPID(); err == nil && pid != 0 {
		if ch, ok := ownChild(pid); ok {
			exited = ch.exited
		}
	}
	// A synchronous standby shows as such a moment after it streams.
	query := "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')"
	kind := "synchronous standby"
	if async {
		query = "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
		kind = "standby"
	}
	deadline := time.Now().Add(startTimeout)
	for {
		var n int
		conn, err := connect(ctx, primary.URL())
		if err == nil {
			err = conn.QueryRow(ctx, query).Scan(&n)
			_ = conn.Close(ctx)
		}
		if err == nil && n > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %s streams from %s after %s: the standby in %s never came back (last error: %v)%s",
				kind, primary.DataDir, startTimeout, standby.DataDir, err, standby.logTail())
		}
		select {
		case <-exited:
			return fmt.Errorf("the standby in %s exited before it streamed from %s%s", standby.DataDir, primary.DataDir, standby.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop stops both nodes.
func (r *Replicated) Stop(ctx context.Context) error {
	return errors.Join(r.Nodes[0].Stop(ctx), r.Nodes[1].Stop(ctx))
}

func (r *Replicated) lock(ctx context.Context) (func(), error) {
	c := Cluster{lockFile: r.lockFile}
	return c.lock(ctx)
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
	// Every child dead (a zombie has let go of the shared memory), and the
	// postmaster gone from the process table: dead is not enough there,
	// because postgres takes the lock files a zombie left behind for a
	// live server's and refuses to start on its port (child.go).
	for i, p := range procs[:len(procs)-1] {
		if err := awaitDead(context.Background(), p, starts[i]); err != nil {
			return fmt.Errorf("crash postgres in %s: %w", c.DataDir, err)
		}
	}
	if err := awaitGone(context.Background(), pid, start, "postgres"); err != nil {
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
