package localpg

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rocketrides/rocketrides/internal/platform/project"
)

// The replicated cluster is what users run in production, at the scale of
// one machine: etcd and two PostgreSQL nodes, each managed by Patroni,
// which alone decides which node is the leader, promotes a standby when
// the leader's lock expires, rewinds a former leader and rejoins it, and
// names the synchronous standby in synchronous_standby_names as standbys
// come and go. Nothing in this package promotes a node: the failover drill
// kills one as a machine dies, and Patroni does the rest.
//
// Every process runs as a direct child of the process that starts it
// (child.go), on loopback ports, under one directory of .data/. Patroni
// detaches the postmasters it starts (their parent is init), so that its
// own restart does not stop Postgres; Kill therefore kills the postmaster
// by its pid file, and waits until it has left the process table.

// HATTL is the cluster's leader lock: a leader whose Patroni has not
// renewed it for that long loses it, and a synchronous standby takes over.
// A failover takes about that long (docs/failures.md measures it); a
// shorter one would demote a healthy leader whose loop a loaded machine
// held up for a few seconds. Patroni needs loop_wait + 2 × retry_timeout
// <= ttl, which Patroni 3.0 does not check: haLoopWait and haRetryTimeout.
const (
	HATTL          = 10 * time.Second
	haLoopWait     = 1 * time.Second
	haRetryTimeout = 4 * time.Second
)

// haTimeout bounds each wait for the cluster: a leader, a synchronous
// standby, a node's rejoin (crash recovery, pg_rewind, catching up).
const haTimeout = 3 * time.Minute

// haUser runs etcd and Patroni (and so Postgres) when this process is
// root: the account Debian's postgresql package creates.
const haUser = "postgres"

// haHost is the loopback address every process of a replicated cluster
// listens on: 127.0.0.2, not 127.0.0.1. A connection to any loopback
// address leaves from 127.0.0.1, on an ephemeral port (on Linux an even
// one, from 32768 to 60999), and a node that restarts after a kill cannot
// bind 127.0.0.1:P while some long-lived connection elsewhere happens to
// hold 127.0.0.1:P as its own end. Nothing leaves from 127.0.0.2, so its
// ports stay free for the node that owns them.
const haHost = "127.0.0.2"

// HAMode is how a replicated cluster's leader confirms a commit:
// Patroni's synchronous_mode and synchronous_mode_strict. It is set when
// the cluster is created and kept in etcd, in Patroni's dynamic
// configuration.
type HAMode string

const (
	// HAStrict is synchronous mode, strict: a commit returns once the
	// synchronous standby has flushed it, and while no standby is there
	// no commit returns at all. No failover loses an acknowledged commit,
	// and the leader Patroni lost track of cannot acknowledge one either.
	// The price, with two nodes: while either node is down, the leader,
	// promoted or not, takes no writes. It is the project's cluster's
	// mode (cmd/localpg ha).
	HAStrict HAMode = "strict"
	// HARelaxed is synchronous mode, not strict: a commit returns once the
	// synchronous standby has flushed it, but while no standby is there
	// Patroni empties synchronous_standby_names so that writes go on,
	// confirmed by the leader alone, until one is back.
	HARelaxed HAMode = "relaxed"
	// HAAsync is synchronous mode off: the leader acknowledges a commit
	// before any standby has it, and a failover loses the commits still
	// in flight.
	HAAsync HAMode = "async"
)

// settings are the mode's Patroni settings, for an error that names them.
func (m HAMode) settings() string {
	switch m {
	case HAStrict:
		return "synchronous_mode and synchronous_mode_strict on"
	case HARelaxed:
		return "synchronous_mode on, synchronous_mode_strict off"
	default:
		return "synchronous_mode off"
	}
}

// HAOptions configure a replicated cluster. The zero value is a relaxed
// synchronous cluster (HARelaxed), as the tests' scratch clusters want,
// under .data/ha, on the ports from LOCALPG_PORT+4; cmd/localpg creates
// the project's strict.
type HAOptions struct {
	// Dir holds etcd's data, each node's directory (data, Patroni's
	// configuration) and the logs. Default: .data/ha in the project root.
	Dir string
	// Port is the first of the cluster's six ports on 127.0.0.2 (haHost): etcd's
	// client and peer ports, then each node's Postgres and REST API
	// ports. Default: LOCALPG_PORT+4 (DefaultPort+4 without it), so that
	// the cluster takes +4 to +9.
	Port int
	// Mode is the cluster's: HAStrict, HARelaxed or HAAsync. Start creates
	// a new cluster in it and refuses a cluster created in another.
	// Default: whatever mode the cluster was created in, and HARelaxed
	// for a new one.
	Mode HAMode
	// BinDir holds the PostgreSQL server binaries, as in Options.
	BinDir string
}

// HA is a Patroni cluster of two nodes on etcd.
type HA struct {
	// Dir holds everything of the cluster's.
	Dir string
	// Nodes are node-a and node-b.
	Nodes [2]*HANode
	// Mode is the cluster's mode as asked for (HAOptions.Mode), and once
	// Start has run, as the cluster was created.
	Mode HAMode

	etcdClientPort, etcdPeerPort int
	etcdDir, etcdLog             string
	binDir                       string
	runAs                        *account
	lockFile                     string
}

// HANode is one node: Patroni and the Postgres it manages.
type HANode struct {
	// Name is the node's name in Patroni, and its standby's
	// application_name.
	Name string
	// Port is Postgres's, RESTPort Patroni's REST API's, on haHost.
	Port, RESTPort int
	// DataDir is Postgres's data directory, LogFile where Patroni and
	// Postgres write.
	DataDir, LogFile string

	dir, configFile string
	ha              *HA
}

// haNodeNames name the nodes in Patroni.
var haNodeNames = [2]string{"node-a", "node-b"}

// NewHA resolves opts into a cluster without starting anything.
func NewHA(opts HAOptions) (*HA, error) {
	dir := opts.Dir
	if dir == "" {
		root, err := project.Root()
		if err != nil {
			return nil, fmt.Errorf("%w; set HAOptions.Dir", err)
		}
		dir = filepath.Join(root, ".data", "ha")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", dir, err)
	}
	port := opts.Port
	if port == 0 {
		if port, err = PortAbove(4); err != nil {
			return nil, err
		}
	}
	switch opts.Mode {
	case "", HAStrict, HARelaxed, HAAsync:
	default:
		return nil, fmt.Errorf("HAOptions.Mode %q: want %s, %s or %s", opts.Mode, HAStrict, HARelaxed, HAAsync)
	}
	if port+5 > 65535 {
		return nil, fmt.Errorf("HAOptions.Port %d: the cluster takes six ports from it", port)
	}
	binDir := opts.BinDir
	if binDir == "" {
		if binDir, err = findBinDir(filepath.Join(dir, haNodeNames[0], "data")); err != nil {
			return nil, err
		}
	}
	h := &HA{
		Dir: dir, Mode: opts.Mode,
		etcdClientPort: port, etcdPeerPort: port + 1,
		etcdDir: filepath.Join(dir, "etcd"), etcdLog: filepath.Join(dir, "etcd.log"),
		binDir: binDir, lockFile: filepath.Join(dir, "ha.lock"),
	}
	if os.Geteuid() == 0 {
		if h.runAs, err = lookupAccount(haUser); err != nil {
			return nil, err
		}
	}
	for i, name := range haNodeNames {
		nodeDir := filepath.Join(dir, name)
		h.Nodes[i] = &HANode{
			Name: name, Port: port + 2 + 2*i, RESTPort: port + 3 + 2*i,
			DataDir: filepath.Join(nodeDir, "data"), LogFile: nodeDir + ".log",
			dir: nodeDir, configFile: nodeDir + ".yml", ha: h,
		}
	}
	return h, nil
}

// EnsureHA starts the cluster described by opts (see Start).
func EnsureHA(ctx context.Context, opts HAOptions) (*HA, error) {
	h, err := NewHA(opts)
	if err != nil {
		return nil, err
	}
	if err := h.Start(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

// Start starts etcd and each node's Patroni unless they run, then waits
// for a leader and, in synchronous mode, for a synchronous standby: until
// one is there, a relaxed cluster would acknowledge commits no other node
// has, and a strict one would take none. The first start creates the
// cluster in h.Mode: one node initialises it, the other copies it. A
// cluster created in another mode than h.Mode is refused.
func (h *HA) Start(ctx context.Context) error {
	unlock, err := h.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if err := h.startEtcd(ctx); err != nil {
		return err
	}
	for _, n := range h.Nodes {
		if err := n.start(); err != nil {
			return err
		}
	}
	leader, err := h.AwaitLeader(ctx)
	if err != nil {
		return err
	}
	mode, err := leader.mode(ctx)
	if err != nil {
		return err
	}
	if h.Mode != "" && h.Mode != mode {
		return fmt.Errorf("the cluster in %s was created %s (%s), not %s (%s): to change its mode, stop it and remove %s",
			h.Dir, mode, mode.settings(), h.Mode, h.Mode.settings(), h.Dir)
	}
	h.Mode = mode
	if h.Mode == HAAsync {
		return h.awaitStandby(ctx, "/replica", "streaming standby")
	}
	return h.awaitStandby(ctx, "/sync", "synchronous standby")
}

// Stop stops the standbys' Patroni, then the leader's (each stops its
// Postgres), then etcd. A postmaster whose Patroni was killed is stopped
// on its own.
func (h *HA) Stop(ctx context.Context) error {
	unlock, err := h.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	// The leader last: stopped first, it would hand its lock to a standby
	// that is about to stop too.
	nodes := h.Nodes[:]
	if leader, err := h.Leader(ctx); err == nil {
		nodes = []*HANode{h.Other(leader), leader}
	}
	var errs []error
	for _, n := range nodes {
		errs = append(errs, n.stop(ctx))
	}
	errs = append(errs, stopProcess(ctx, findProcess("--data-dir", h.etcdDir), syscall.SIGTERM, "etcd"))
	return errors.Join(errs...)
}

// DatabaseURL is a multi-host URL of database name listing both nodes
// with target_session_attrs=read-write: pgx tries each host and keeps the
// one that takes writes, so a client reaches the leader before and after
// a failover without being reconfigured.
func (h *HA) DatabaseURL(name string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(Superuser),
		Host:     fmt.Sprintf("%s:%d,%s:%d", haHost, h.Nodes[0].Port, haHost, h.Nodes[1].Port),
		Path:     "/" + name,
		RawQuery: "sslmode=disable&target_session_attrs=read-write",
	}
	return u.String()
}

// CreateDatabase creates database name on the leader unless it exists,
// and waits until each running standby has replayed it. A synchronous
// commit is flushed on the standby, not yet replayed there, and a
// multi-host URL that lists the standby first is refused by it ("database
// does not exist"), which ends pgx's tour of the hosts.
func (h *HA) CreateDatabase(ctx context.Context, name string) error {
	if err := createDatabase(ctx, h.DatabaseURL("postgres"), name); err != nil {
		return err
	}
	for _, n := range h.Nodes {
		err := poll(ctx, 50*time.Millisecond, "database "+name+" on "+n.Name, nil, noTail, func() (bool, error) {
			conn, err := connect(ctx, n.URL())
			if err != nil {
				return true, nil // not running: it copies the database when it starts
			}
			defer conn.Close(ctx)
			var exists bool
			err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists)
			return err == nil && exists, err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Member is a node as Patroni's REST API describes it (GET /cluster).
type Member struct {
	Name string `json:"name"`
	// Role is leader, sync_standby or replica.
	Role string `json:"role"`
	// State is running, streaming, starting, stopped, crashed...
	State string `json:"state"`
}

// Members are the nodes as the cluster sees them, from the first node
// whose Patroni answers.
func (h *HA) Members(ctx context.Context) ([]Member, error) {
	var errs []error
	for _, n := range h.Nodes {
		var cluster struct {
			Members []Member `json:"members"`
		}
		status, body, err := n.rest(ctx, http.MethodGet, "/cluster", nil)
		if err == nil && status == http.StatusOK {
			if err := json.Unmarshal(body, &cluster); err != nil {
				return nil, fmt.Errorf("decode %s's /cluster: %w", n.Name, err)
			}
			return cluster.Members, nil
		}
		errs = append(errs, fmt.Errorf("%s: status %d, %w", n.Name, status, err))
	}
	return nil, fmt.Errorf("no Patroni answers GET /cluster: %w", errors.Join(errs...))
}

// Leader is the node that holds the leader lock, by the REST API of the
// node itself (GET /leader answers 200 only on the leader).
func (h *HA) Leader(ctx context.Context) (*HANode, error) {
	for _, n := range h.Nodes {
		if ok, _ := n.Is(ctx, "/leader"); ok {
			return n, nil
		}
	}
	return nil, errors.New("no node is the leader")
}

// Other is the node that is not n.
func (h *HA) Other(n *HANode) *HANode {
	if h.Nodes[0] == n {
		return h.Nodes[1]
	}
	return h.Nodes[0]
}

// PatchConfig changes the cluster's dynamic configuration (PATCH /config
// on the leader), such as synchronous_mode, as patronictl edit-config
// would.
func (h *HA) PatchConfig(ctx context.Context, patch map[string]any) error {
	leader, err := h.Leader(ctx)
	if err != nil {
		return err
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	status, answer, err := leader.rest(ctx, http.MethodPatch, "/config", body)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("PATCH /config on %s: status %d: %s", leader.Name, status, answer)
	}
	return nil
}

// Is reports whether the node's REST API answers 200 to a health check
// such as /leader, /sync (a synchronous standby), /replica or /health.
func (n *HANode) Is(ctx context.Context, check string) (bool, error) {
	status, _, err := n.rest(ctx, http.MethodGet, check, nil)
	return err == nil && status == http.StatusOK, err
}

// Await waits until the node answers 200 to check (see Is), within
// haTimeout.
func (n *HANode) Await(ctx context.Context, check string) error {
	return poll(ctx, 100*time.Millisecond, n.Name+" to answer 200 to "+check, nil,
		func() string { return tail(n.LogFile) }, func() (bool, error) { return n.Is(ctx, check) })
}

// Postgres is the node's Postgres as a Cluster, for its processes: Crash,
// StallReplication, Processes. Start and Stop are Patroni's.
func (n *HANode) Postgres() Cluster {
	return Cluster{DataDir: n.DataDir, Port: n.Port, BinDir: n.ha.binDir, LogFile: n.LogFile, Host: haHost}
}

// URL is the address of the node's maintenance database, whatever its
// role.
func (n *HANode) URL() string {
	return n.Postgres().URL()
}

// Kill kills the node as a machine that loses power would stop: Patroni
// first, so that it does not react, then the postmaster and every process
// it started, all with SIGKILL. It returns once they are all gone.
// Killing a node that does not run is not an error.
func (n *HANode) Kill() error {
	if err := n.KillAgent(); err != nil {
		return err
	}
	if err := n.Postgres().Crash(); err != nil {
		return fmt.Errorf("kill %s's postgres: %w", n.Name, err)
	}
	return nil
}

// KillAgent SIGKILLs the node's Patroni alone and leaves its Postgres
// running, as a crash of the agent would: with no watchdog to reset the
// machine, a leader's Postgres goes on taking connections after its lock
// expires.
func (n *HANode) KillAgent() error {
	pid := findProcess(n.configFile)
	if pid == 0 {
		return nil
	}
	start, _ := startTime(pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s's patroni %d: %w", n.Name, pid, err)
	}
	return awaitGone(context.Background(), pid, start, "patroni")
}

// Start starts the node's Patroni unless it runs, as a supervisor
// restarts a crashed agent or a machine that boots again: Patroni starts
// or adopts Postgres, and a former leader rewinds and rejoins by itself.
// It does not wait; Await(ctx, "/sync") waits for the node to be a
// synchronous standby again.
func (n *HANode) Start(ctx context.Context) error {
	unlock, err := n.ha.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	return n.start()
}

func (h *HA) lock(ctx context.Context) (func(), error) {
	c := Cluster{lockFile: h.lockFile}
	return c.lock(ctx)
}

// prepare creates dir for the account that runs the cluster.
func (h *HA) prepare(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if h.runAs == nil {
		return nil
	}
	if err := (Cluster{DataDir: dir, runAs: h.runAs}).checkTraversable(); err != nil {
		return err
	}
	if err := os.Chown(dir, int(h.runAs.uid), int(h.runAs.gid)); err != nil {
		return fmt.Errorf("hand %s to %s: %w", dir, h.runAs.name, err)
	}
	return nil
}

// startEtcd starts etcd, one member with the v3 API only, unless it runs,
// and waits until it answers.
func (h *HA) startEtcd(ctx context.Context) error {
	var exited <-chan struct{} // of the etcd this call starts
	if findProcess("--data-dir", h.etcdDir) == 0 {
		bin, err := exec.LookPath("etcd")
		if err != nil {
			return fmt.Errorf("etcd is not installed (Debian: apt-get install etcd-server etcd-client): %w", err)
		}
		if err := h.prepare(h.etcdDir); err != nil {
			return err
		}
		client := fmt.Sprintf("http://%s:%d", haHost, h.etcdClientPort)
		peer := fmt.Sprintf("http://%s:%d", haHost, h.etcdPeerPort)
		args := []string{
			"--name", "rocketrides", "--data-dir", h.etcdDir,
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "rocketrides=" + peer, "--initial-cluster-token", "rocketrides",
			"--initial-cluster-state", "new", "--enable-v2=false",
			"--heartbeat-interval", "100", "--election-timeout", "1000",
		}
		_, ch, err := spawn(bin, args, h.etcdLog, h.runAs, []string{"PATH=/usr/bin:/bin"})
		if err != nil {
			return err
		}
		exited = ch.exited
	}
	return poll(ctx, 50*time.Millisecond, "etcd to be healthy", exited, func() string { return tail(h.etcdLog) }, func() (bool, error) {
		var health struct {
			Health string `json:"health"`
		}
		status, body, err := call(ctx, http.MethodGet, fmt.Sprintf("http://%s:%d/health", haHost, h.etcdClientPort), nil)
		return err == nil && status == http.StatusOK && json.Unmarshal(body, &health) == nil && health.Health == "true", err
	})
}

// AwaitLeader waits until a node holds the leader lock and its Postgres
// takes writes: Patroni answers 200 to /leader while the promotion is
// still under way.
func (h *HA) AwaitLeader(ctx context.Context) (*HANode, error) {
	var leader *HANode
	err := poll(ctx, 100*time.Millisecond, "a leader in the cluster in "+h.Dir, nil, h.tails, func() (bool, error) {
		l, err := h.Leader(ctx)
		if err != nil || !l.writable(ctx) {
			return false, err
		}
		leader = l
		return true, nil
	})
	return leader, err
}

// awaitStandby waits until a node answers 200 to check.
func (h *HA) awaitStandby(ctx context.Context, check, what string) error {
	return poll(ctx, 100*time.Millisecond, "a "+what+" in the cluster in "+h.Dir, nil, h.tails, func() (bool, error) {
		return slices.ContainsFunc(h.Nodes[:], func(n *HANode) bool { ok, _ := n.Is(ctx, check); return ok }), nil
	})
}

// tails is the end of both nodes' logs, to follow an error.
func (h *HA) tails() string { return tail(h.Nodes[0].LogFile) + tail(h.Nodes[1].LogFile) }

// noTail is no log's end: a wait whose error needs none.
func noTail() string { return "" }

// poll asks done every interval until it says true, within haTimeout. A
// wait that times out, whose ctx ends, or whose process exits (exited,
// when not nil) fails, naming what it waited for, done's last error and
// more (the end of a log).
func poll(ctx context.Context, every time.Duration, what string, exited <-chan struct{}, more func() string, done func() (bool, error)) error {
	deadline := time.Now().Add(haTimeout)
	for {
		ok, err := done()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			last := ""
			if err != nil {
				last = fmt.Sprintf(" (last error: %v)", err)
			}
			return fmt.Errorf("waited %s for %s in vain%s%s", haTimeout, what, last, more())
		}
		select {
		case <-exited:
			return fmt.Errorf("wait for %s: the process exited%s", what, more())
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w", what, ctx.Err())
		case <-time.After(every):
		}
	}
}

// writable reports whether the node's Postgres takes writes.
func (n *HANode) writable(ctx context.Context) bool {
	conn, err := connect(ctx, n.URL())
	if err != nil {
		return false
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var recovering bool
	return conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovering) == nil && !recovering
}

// mode reads the cluster's mode from its dynamic configuration.
func (n *HANode) mode(ctx context.Context) (HAMode, error) {
	status, body, err := n.rest(ctx, http.MethodGet, "/config", nil)
	if err != nil {
		return "", err
	}
	var cfg struct {
		SynchronousMode       bool `json:"synchronous_mode"`
		SynchronousModeStrict bool `json:"synchronous_mode_strict"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &cfg) != nil {
		return "", fmt.Errorf("GET /config on %s: status %d: %s", n.Name, status, body)
	}
	switch {
	case !cfg.SynchronousMode:
		return HAAsync, nil
	case cfg.SynchronousModeStrict:
		return HAStrict, nil
	}
	return HARelaxed, nil
}

// Created reports whether the cluster has been created: etcd, which
// keeps its mode, has data. Until then, Start creates it in Mode.
func (h *HA) Created() bool {
	_, err := os.Stat(filepath.Join(h.etcdDir, "member"))
	return err == nil
}

// start writes the node's configuration and starts its Patroni unless it
// runs.
func (n *HANode) start() error {
	if findProcess(n.configFile) != 0 {
		return nil
	}
	if err := n.ha.prepare(n.dir); err != nil {
		return err
	}
	conf, err := json.MarshalIndent(n.config(), "", "  ")
	if err != nil {
		return err
	}
	// JSON is YAML: Patroni reads it as it is.
	if err := os.WriteFile(n.configFile, conf, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", n.configFile, err)
	}
	patroni, err := exec.LookPath("patroni")
	if err != nil {
		return fmt.Errorf("patroni is not installed (Debian: apt-get install patroni): %w", err)
	}
	// Debian's python3, which has psycopg2: a python3 earlier on PATH may
	// not. A bare environment: Patroni reads PATRONI_* variables.
	env := []string{"HOME=" + n.dir, "PATH=/usr/bin:/bin", "LANG=C.UTF-8"}
	if _, _, err := spawn("/usr/bin/python3", []string{patroni, n.configFile}, n.LogFile, n.ha.runAs, env); err != nil {
		return err
	}
	return nil
}

// config is the node's Patroni configuration.
func (n *HANode) config() map[string]any {
	h := n.ha
	socketDir := n.dir
	if len(filepath.Join(socketDir, fmt.Sprintf(".s.PGSQL.%d", n.Port))) > maxSocketPath {
		socketDir = "" // TCP only, as every URL is
	}
	local := fmt.Sprintf("%s:%d", haHost, n.Port)
	rest := fmt.Sprintf("%s:%d", haHost, n.RESTPort)
	user := map[string]any{"username": Superuser}
	// The mode a new cluster is created in; an existing one keeps its
	// own, whatever its nodes' bootstrap section says.
	mode := cmp.Or(h.Mode, HARelaxed)
	return map[string]any{
		"scope": "rocketrides",
		"name":  n.Name,
		"log":   map[string]any{"level": "INFO"},
		"restapi": map[string]any{
			"listen": rest, "connect_address": rest,
		},
		"etcd3": map[string]any{"hosts": fmt.Sprintf("%s:%d", haHost, h.etcdClientPort), "protocol": "http"},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				"ttl":           int(HATTL.Seconds()),
				"loop_wait":     int(haLoopWait.Seconds()),
				"retry_timeout": int(haRetryTimeout.Seconds()),
				// A commit returns once the synchronous standby has it, and
				// only that standby may be promoted. Strict, with the
				// standby gone no commit returns until it is back; relaxed,
				// Patroni empties synchronous_standby_names and writes go
				// on, on one machine (HAMode).
				"synchronous_mode":        mode != HAAsync,
				"synchronous_mode_strict": mode == HAStrict,
				"postgresql": map[string]any{
					"use_pg_rewind": true,
					"use_slots":     true,
					// Settings every node must share live here: Patroni
					// ignores a node's own value of most of them.
					"parameters": map[string]any{
						"wal_level":             "replica",
						"hot_standby":           "on",
						"wal_log_hints":         "on", // pg_rewind
						"max_wal_senders":       10,
						"max_replication_slots": 10,
						"wal_keep_size":         "256MB",
						// The default of 5 s slows every start and rejoin.
						"wal_retrieve_retry_interval": "500ms",
						"max_connections":             200,
						"shared_buffers":              "128MB",
						"fsync":                       "on",
						"synchronous_commit":          "on",
						"log_checkpoints":             "off",
						// See server.go: a silent session's transaction ends.
						"idle_in_transaction_session_timeout": "15s",
					},
				},
			},
			"initdb": []any{map[string]any{"encoding": "UTF8"}, "no-locale"},
		},
		"postgresql": map[string]any{
			"listen":          local,
			"connect_address": local,
			"data_dir":        n.DataDir,
			"bin_dir":         h.binDir,
			"pgpass":          filepath.Join(n.dir, "pgpass"),
			"use_unix_socket": false,
			"authentication": map[string]any{
				"superuser": user, "replication": user, "rewind": user,
			},
			"parameters": map[string]any{"unix_socket_directories": socketDir},
			// Loopback only, throwaway data: trust, as the project's
			// cluster does.
			"pg_hba": []string{
				"host replication all 127.0.0.0/8 trust",
				"host all all 127.0.0.0/8 trust",
			},
		},
		// No watchdog here (no /dev/watchdog, no softdog): a leader whose
		// Patroni dies keeps its Postgres running. docs/failures.md says
		// what that costs and why production needs one. Quoted: a bare
		// off is YAML's false, which Patroni refuses.
		"watchdog": map[string]any{"mode": "off"},
	}
}

// stop stops the node's Patroni (SIGTERM: it stops Postgres and gives up
// the leader lock), or, when Patroni is not running, a postmaster left
// behind by a killed Patroni (fast shutdown).
func (n *HANode) stop(ctx context.Context) error {
	if pid := findProcess(n.configFile); pid != 0 {
		if err := stopProcess(ctx, pid, syscall.SIGTERM, "patroni "+n.Name); err != nil {
			return err
		}
	}
	pid, err := n.Postgres().postmasterPID()
	if err != nil || pid == 0 {
		return err
	}
	return stopProcess(ctx, pid, syscall.SIGINT, "postgres "+n.Name) // fast shutdown
}

// stopProcess sends pid sig and waits until it has left the process
// table.
func stopProcess(ctx context.Context, pid int, sig syscall.Signal, what string) error {
	if pid == 0 {
		return nil
	}
	start, _ := startTime(pid)
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop %s %d: %w", what, pid, err)
	}
	return awaitGone(ctx, pid, start, what)
}

// findProcess is the pid of a live process of this machine whose command
// line holds args in a row (etcd's --data-dir and its directory, the path
// of a node's Patroni configuration), or 0. The command line says which
// cluster a process serves, where a pid file could be stale.
func findProcess(args ...string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || len(cmdline) == 0 {
			continue // gone, or a zombie
		}
		fields := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		for i := range fields {
			if i+len(args) <= len(fields) && slices.Equal(fields[i:i+len(args)], args) {
				if st, ok := statFields(pid); ok && st[0] != "Z" {
					return pid
				}
			}
		}
	}
	return 0
}

// rest calls the node's Patroni REST API.
func (n *HANode) rest(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	return call(ctx, method, fmt.Sprintf("http://%s:%d%s", haHost, n.RESTPort, path), body)
}

// call makes one HTTP request of Patroni or etcd, bounded at 3 s, and
// returns the status and the body.
func call(ctx context.Context, method, u string, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	return resp.StatusCode, answer, err
}

// tail is the end of a log file, formatted to follow an error.
func tail(logFile string) string {
	return Cluster{LogFile: logFile}.logTail()
}
