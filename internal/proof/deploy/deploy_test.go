package deploy_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"
)

// processes are the long-running processes of the app, each a command
// under cmd/ with a Procfile line and a compose service of the same name.
var processes = []string{"fakestripe", "api", "enqueuer", "worker", "completer", "reaper", "reconciler", "simulator", "console"}

// tools are the commands under cmd/ that are not processes: one-shots run
// before or beside them, the local database manager, the benchmark and the
// conformance harness for clients.
var tools = []string{"bench", "chaos", "clientcheck", "localpg", "migrate", "seed"}

// wiring are the settings whose defaults point at the host's loopback: in
// compose they must name the service instead, wherever a command reads
// them.
var wiring = []string{"STRIPE_API_BASE", "API_URL", "CONSOLE_API_URL"}

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", ".."))
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(dir, "go.mod"))
	return dir
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// commands lists the directories under cmd/.
func commands(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root(t), "cmd"))
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names
}

var (
	// env.Required("NAME"), env.Duration("NAME", ...), env.IntOrZero("NAME", ...), os.Getenv("NAME") ...
	readsEnv    = regexp.MustCompile(`\b(?:String|Duration|Int|Port|Host|Fraction|Bool|Required|Getenv|LookupEnv)(?:OrZero)?\(\s*"([A-Z][A-Z0-9_]*)"`)
	requiresEnv = regexp.MustCompile(`\.Required\(\s*"([A-Z][A-Z0-9_]*)"`)
)

// commandEnv is what a command reads from the environment.
type commandEnv struct {
	read, required []string
}

// envOf scans the Go files of cmd/name, and of internal/platform/config when the
// command takes its logger from there (directly or through process.Main), for
// the settings it reads.
func envOf(t *testing.T, name string) commandEnv {
	t.Helper()
	dir := filepath.Join(root(t), "cmd", name)
	require.DirExists(t, dir, "cmd/%s: a process or service runs %s", name, name)
	var env commandEnv
	var scan func(dir string, all bool)
	scan = func(dir string, all bool) {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src := read(t, f)
			for _, m := range readsEnv.FindAllStringSubmatch(src, -1) {
				env.read = append(env.read, m[1])
			}
			if !all {
				continue
			}
			for _, m := range requiresEnv.FindAllStringSubmatch(src, -1) {
				env.required = append(env.required, m[1])
			}
			if strings.Contains(src, "config.Logger(") || strings.Contains(src, "process.Main(") {
				scan(filepath.Join(root(t), "internal", "platform", "config"), false)
			}
		}
	}
	scan(dir, true)
	slices.Sort(env.read)
	env.read = slices.Compact(env.read)
	slices.Sort(env.required)
	env.required = slices.Compact(env.required)
	return env
}

// needs is what a compose service running name must set: what the
// command requires, and the wiring it reads.
func (e commandEnv) needs() []string {
	out := slices.Clone(e.required)
	for _, w := range wiring {
		if slices.Contains(e.read, w) && !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}

// process is a Procfile line.
type process struct {
	name, command string
}

var (
	procfileLine = regexp.MustCompile(`^([A-Za-z0-9_-]+):\s*(.+)$`)
	binRef       = regexp.MustCompile(`\bbin/([a-z0-9_-]+)`)
	execRef      = regexp.MustCompile(`\bexec\s+bin/([a-z0-9_-]+)`)
	assignment   = regexp.MustCompile(`(?:^|[\s;&|])([A-Z][A-Z0-9_]*)=`)
	// $NAME or ${NAME}, and whether a default (${NAME:-...}) follows.
	envRef = regexp.MustCompile(`\$\{?([A-Z][A-Z0-9_]*)(:-)?`)
)

func readProcfile(t *testing.T) []process { return readProcfileNamed(t, "Procfile") }

// readProcfileNamed reads the Procfile called name, at the project's root.
func readProcfileNamed(t *testing.T, name string) []process {
	t.Helper()
	var procs []process
	for line := range strings.Lines(read(t, filepath.Join(root(t), name))) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := procfileLine.FindStringSubmatch(line)
		require.NotNil(t, m, "Procfile line %q is not name: command", line)
		procs = append(procs, process{name: m[1], command: m[2]})
	}
	return procs
}

// binary is the command the process execs: the process itself, which
// the runner signals to stop it.
func (p process) binary(t *testing.T) string {
	t.Helper()
	m := execRef.FindAllStringSubmatch(p.command, -1)
	require.Len(t, m, 1, "Procfile %s: exec exactly one bin/ command, so that the runner's signals reach it", p.name)
	return m[0][1]
}

// binaries are every command the line runs, the exec'd one last.
func (p process) binaries() []string {
	var out []string
	for _, m := range binRef.FindAllStringSubmatch(p.command, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestProcfile(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		procs    []process
		exports  []string          // what the Makefile exports to the Procfile runner
		defaults map[string]string // export NAME ?= default
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		b := &testBundle{procs: readProcfile(t), defaults: map[string]string{}}
		makefile := read(t, filepath.Join(root(t), "Makefile"))
		for _, m := range regexp.MustCompile(`(?m)\bexport\s+([A-Z][A-Z0-9_]*)`).FindAllStringSubmatch(makefile, -1) {
			b.exports = append(b.exports, m[1])
		}
		// export A B C: each of them.
		for _, m := range regexp.MustCompile(`(?m)^export((?:[ \t]+[A-Z][A-Z0-9_]*)+)[ \t]*$`).FindAllStringSubmatch(makefile, -1) {
			b.exports = append(b.exports, strings.Fields(m[1])...)
		}
		for _, m := range regexp.MustCompile(`(?m)^export\s+([A-Z][A-Z0-9_]*)\s*\?=\s*(\S+)`).FindAllStringSubmatch(makefile, -1) {
			b.defaults[m[1]] = m[2]
		}
		require.Contains(t, b.exports, "DATABASE_URL")
		return b
	}

	t.Run("RunsEveryProcess", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var names []string
		for _, p := range b.procs {
			names = append(names, p.name)
			require.Equal(t, p.name, p.binary(t), "Procfile %s: a process is named after its command", p.name)
			envOf(t, p.binary(t)) // the command exists
		}
		require.ElementsMatch(t, processes, names)
		// A new command is either a process or a tool; a process
		// without a Procfile line would never run in make dev.
		for _, c := range commands(t) {
			require.True(t, slices.Contains(processes, c) || slices.Contains(tools, c),
				"cmd/%s is neither a process (Procfile, docker-compose.yml) nor a known tool", c)
		}
	})

	t.Run("SetsRequiredEnv", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, p := range b.procs {
			set := slices.Clone(b.exports)
			for _, m := range assignment.FindAllStringSubmatch(p.command, -1) {
				set = append(set, m[1])
			}
			for _, bin := range p.binaries() {
				for _, name := range envOf(t, bin).required {
					require.Contains(t, set, name, "Procfile %s: bin/%s requires %s; export it from the Makefile or set it on the line", p.name, bin, name)
				}
			}
		}
	})

	t.Run("ReferencesExportedEnv", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, p := range b.procs {
			for _, m := range envRef.FindAllStringSubmatch(p.command, -1) {
				if m[2] == "" {
					require.Contains(t, b.exports, m[1], "Procfile %s uses $%s, which the Makefile does not export", p.name, m[1])
				}
			}
		}
	})

	// make dev binds every listener to loopback: the Stripe fake answers
	// anyone with any sk_ key, and the api's metrics are unauthenticated.
	t.Run("ListensOnLoopback", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		listeners := 0
		for _, p := range b.procs {
			env := envOf(t, p.binary(t))
			for _, name := range []string{"HOST", "METRICS_ADDR"} {
				if !slices.Contains(env.read, name) {
					continue
				}
				m := regexp.MustCompile(`\b` + name + `=\$\{?([A-Z][A-Z0-9_]*)`).FindStringSubmatch(p.command)
				if m == nil {
					// Without METRICS_ADDR there is no metrics listener;
					// without HOST the command's own default would decide.
					require.NotEqual(t, "HOST", name,
						"Procfile %s: bin/%s listens; set HOST=$..._HOST on its line, 127.0.0.1 in the Makefile", p.name, p.binary(t))
					continue
				}
				def, ok := b.defaults[m[1]]
				require.True(t, ok, "Procfile %s: the Makefile gives %s no default", p.name, m[1])
				require.True(t, def == "127.0.0.1" || strings.HasPrefix(def, "127.0.0.1:"),
					"Procfile %s: %s=$%s defaults to %s, not loopback", p.name, name, m[1], def)
				listeners++
			}
		}
		require.GreaterOrEqual(t, listeners, 3, "the fake, the api and the api's metrics")
	})

	// make dev TRACES=on adds Jaeger (Procfile.traces), which listens on
	// loopback too, on ports the Makefile names, and is where every
	// process sends its traces.
	t.Run("TracesOnLoopback", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		procs := readProcfileNamed(t, "Procfile.traces")
		require.Len(t, procs, 1)
		require.Equal(t, "jaeger", procs[0].name)
		require.Regexp(t, `^exec\b.*"\$JAEGER" --config scripts/jaeger\.yaml$`, procs[0].command,
			"Procfile.traces: exec Jaeger, so that the runner's signals reach it")
		for _, m := range envRef.FindAllStringSubmatch(procs[0].command, -1) {
			require.Contains(t, b.exports, m[1], "Procfile.traces uses $%s, which the Makefile does not export", m[1])
		}
		config := read(t, filepath.Join(root(t), "scripts", "jaeger.yaml"))
		endpoints := regexp.MustCompile(`(?m)^\s*endpoint:\s*(\S+)\s*$`).FindAllStringSubmatch(config, -1)
		require.Len(t, endpoints, 4, "OTLP over gRPC and HTTP, the query API over HTTP and gRPC")
		loopback := regexp.MustCompile(`^127\.0\.0\.1:\$\{env:([A-Z][A-Z0-9_]*)\}$`)
		for _, m := range endpoints {
			port := loopback.FindStringSubmatch(m[1])
			require.NotNil(t, port, "scripts/jaeger.yaml: %s is not loopback on a port the Makefile names", m[1])
			require.Contains(t, b.exports, port[1], "scripts/jaeger.yaml: the Makefile does not export %s", port[1])
		}
		require.Equal(t, "http://127.0.0.1:$(JAEGER_OTLP_GRPC_PORT)", b.defaults["OTEL_EXPORTER_OTLP_ENDPOINT"])
		require.Contains(t, config, "endpoint: 127.0.0.1:${env:JAEGER_OTLP_GRPC_PORT}")
	})

	t.Run("SimulatorWaitsForAPI", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		i := slices.IndexFunc(b.procs, func(p process) bool { return p.name == "simulator" })
		require.GreaterOrEqual(t, i, 0)
		require.Regexp(t, `\s-wait\s+\S+`, b.procs[i].command, "the simulator starts with the api; it must wait for it")
		require.Contains(t, b.procs[i].command, "API_URL=http://127.0.0.1:$API_PORT")
	})
}

func TestCompose(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		project *types.Project
		procs   []process
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{project: loadCompose(t, "docker-compose.yml", "rocketrides"), procs: readProcfile(t)}
	}
	service := func(t *testing.T, b *testBundle, name string) types.ServiceConfig {
		t.Helper()
		s, err := b.project.GetService(name)
		require.NoError(t, err, "docker-compose.yml has no service %s", name)
		return s
	}
	// appServices are the services running the app's image.
	appServices := func(b *testBundle) []types.ServiceConfig {
		var out []types.ServiceConfig
		for _, s := range b.project.Services {
			if s.Build != nil {
				out = append(out, s)
			}
		}
		slices.SortFunc(out, func(a, b types.ServiceConfig) int { return strings.Compare(a.Name, b.Name) })
		return out
	}
	// dependsOn reports whether s waits, directly or through the
	// services it waits for, for dep to reach condition.
	var dependsOn func(b *testBundle, s types.ServiceConfig, dep, condition string) bool
	dependsOn = func(b *testBundle, s types.ServiceConfig, dep, condition string) bool {
		for name, d := range s.DependsOn {
			if name == dep && d.Condition == condition {
				return true
			}
			if next, err := b.project.GetService(name); err == nil && dependsOn(b, next, dep, condition) {
				return true
			}
		}
		return false
	}

	t.Run("RunsEveryProcfileProcess", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, p := range b.procs {
			s := service(t, b, p.name)
			require.NotEmpty(t, s.Command, "service %s", s.Name)
			require.Equal(t, p.binary(t), s.Command[0], "service %s runs what the Procfile's %s runs", s.Name, p.name)
		}
		for _, tool := range []string{"migrate", "seed"} {
			require.Equal(t, tool, service(t, b, tool).Command[0])
		}
	})

	t.Run("RunsOneImage", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Equal(t, "postgres:15", service(t, b, "postgres").Image)
		apps := appServices(b)
		require.Len(t, apps, len(processes)+2, "every process, migrate and seed")
		for _, s := range apps {
			require.Equal(t, "rocketrides:dev", s.Image, "service %s", s.Name)
			require.Equal(t, root(t), s.Build.Context, "service %s", s.Name)
			require.NotEmpty(t, s.Command, "service %s: the image has no entrypoint", s.Name)
			envOf(t, s.Command[0]) // the command exists
		}
	})

	t.Run("SetsEnvCommandsNeed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, s := range appServices(b) {
			for _, name := range envOf(t, s.Command[0]).needs() {
				v := s.Environment[name]
				require.True(t, v != nil && *v != "", "service %s: %s needs %s", s.Name, s.Command[0], name)
			}
		}
	})

	t.Run("URLsNameServices", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, s := range appServices(b) {
			for name, v := range s.Environment {
				if v == nil {
					continue
				}
				u, err := url.Parse(*v)
				if err != nil || u.Host == "" {
					continue
				}
				_, err = b.project.GetService(u.Hostname())
				require.NoError(t, err, "service %s: %s=%s names no service", s.Name, name, *v)
			}
		}
	})

	t.Run("WaitsForDependencies", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pg := service(t, b, "postgres")
		require.NotNil(t, pg.HealthCheck, "postgres needs a healthcheck for service_healthy")
		require.NotEmpty(t, pg.HealthCheck.Test)
		require.True(t, dependsOn(b, service(t, b, "migrate"), "postgres", types.ServiceConditionHealthy))
		require.True(t, dependsOn(b, service(t, b, "seed"), "fakestripe", types.ServiceConditionStarted))
		require.True(t, dependsOn(b, service(t, b, "api"), "seed", types.ServiceConditionCompletedSuccessfully),
			"the api serves the seeded users")
		require.True(t, dependsOn(b, service(t, b, "simulator"), "api", types.ServiceConditionStarted))
		require.Contains(t, service(t, b, "simulator").Command, "-wait", "started is not ready: the simulator polls /healthz")

		for _, s := range appServices(b) {
			env := envOf(t, s.Command[0])
			if s.Name != "migrate" && slices.Contains(env.read, "DATABASE_URL") {
				require.True(t, dependsOn(b, s, "migrate", types.ServiceConditionCompletedSuccessfully),
					"service %s uses the database before the schema is there", s.Name)
			}
			if s.Name != "fakestripe" && slices.Contains(env.read, "STRIPE_API_BASE") {
				require.True(t, dependsOn(b, s, "fakestripe", types.ServiceConditionStarted),
					"service %s uses the Stripe fake without waiting for it", s.Name)
			}
		}
	})

	t.Run("OneShotsRunOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, name := range []string{"migrate", "seed"} {
			require.Equal(t, types.RestartPolicyNo, service(t, b, name).Restart, "service %s", name)
		}
		for _, name := range processes {
			require.Equal(t, types.RestartPolicyUnlessStopped, service(t, b, name).Restart, "service %s", name)
		}
	})

	t.Run("PublishesAPIAndConsoleOnLoopback", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		published := map[string]string{"api": "5000", "console": "5050"}
		for name, port := range published {
			ports := service(t, b, name).Ports
			require.Len(t, ports, 1, "service %s", name)
			require.Equal(t, port, strconv.FormatUint(uint64(ports[0].Target), 10), "service %s", name)
			require.Equal(t, port, ports[0].Published, "service %s", name)
			require.Equal(t, "127.0.0.1", ports[0].HostIP, "service %s", name)
		}
		require.Equal(t, "5000", *service(t, b, "api").Environment["PORT"])
		require.Equal(t, "5050", *service(t, b, "console").Environment["PORT"])
		for _, s := range b.project.Services {
			if _, ok := published[s.Name]; !ok {
				require.Empty(t, s.Ports, "service %s: only the api and the console are published", s.Name)
			}
		}
	})

	// The processes bind to loopback unless told otherwise; in a
	// container that would be unreachable, so compose says 0.0.0.0.
	t.Run("ListensOnAllInterfacesInContainers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		listeners := 0
		for _, s := range appServices(b) {
			env := envOf(t, s.Command[0])
			if slices.Contains(env.read, "HOST") {
				v := s.Environment["HOST"]
				require.True(t, v != nil && *v == "0.0.0.0", "service %s: %s listens on loopback unless HOST=0.0.0.0", s.Name, s.Command[0])
				listeners++
			}
			if v := s.Environment["METRICS_ADDR"]; v != nil && *v != "" {
				require.True(t, strings.HasPrefix(*v, "0.0.0.0:"), "service %s: METRICS_ADDR=%s is unreachable from other containers", s.Name, *v)
			}
		}
		require.Equal(t, 3, listeners, "the fake, the api and the console")
	})

	t.Run("KeepsMailOnVolume", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		w := service(t, b, "worker")
		dir := w.Environment["MAIL_DIR"]
		require.NotNil(t, dir)
		i := slices.IndexFunc(w.Volumes, func(v types.ServiceVolumeConfig) bool { return v.Target == *dir })
		require.GreaterOrEqual(t, i, 0, "MAIL_DIR %s is not a volume", *dir)
		require.Equal(t, types.VolumeTypeVolume, w.Volumes[i].Type)
		require.Contains(t, read(t, filepath.Join(root(t), "Dockerfile")), *dir,
			"the image creates MAIL_DIR owned by its user, so that a new volume is writable")
	})
}

// loadCompose loads the compose file name, at the root, as the project
// called project: the loader
// validates it against the compose specification's schema, then checks
// that what it references (services, volumes, configs) exists.
func loadCompose(t *testing.T, name, project string) *types.Project {
	t.Helper()
	dir := root(t)
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, name)}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) { o.SetProjectName(project, true) })
	require.NoError(t, err, name)
	return p
}

// TestEnvExample checks that every setting a command reads is documented
// with its default in .env.example.
func TestEnvExample(t *testing.T) {
	t.Parallel()
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Z][A-Z0-9_]*)=`).FindAllStringSubmatch(read(t, filepath.Join(root(t), ".env.example")), -1) {
		documented[m[1]] = true
	}
	var missing []string
	for _, c := range commands(t) {
		for _, name := range envOf(t, c).read {
			if !documented[name] {
				documented[name] = true // reported once
				missing = append(missing, name+" (cmd/"+c+")")
			}
		}
	}
	require.Empty(t, missing, ".env.example does not document these settings")
}

// TestNamesAreInTheReference checks that the ways of running Rocket Rides
// (the Procfile, docker-compose.yml, .env.example) and the README's
// examples use only settings docs/configuration.md lists: a name it does
// not list is one no process reads, and every process would refuse it at
// start.
func TestNamesAreInTheReference(t *testing.T) {
	t.Parallel()
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Z][A-Z0-9_]*)` \\|").FindAllStringSubmatch(read(t, filepath.Join(root(t), "docs", "configuration.md")), -1) {
		listed[m[1]] = true
	}
	require.Contains(t, listed, "COMPLETER_MIN_AGE")
	requireListed := func(where, name string) {
		t.Helper()
		require.True(t, listed[name], "%s uses %s, which docs/configuration.md does not list", where, name)
	}

	for _, p := range readProcfile(t) {
		for _, m := range assignment.FindAllStringSubmatch(p.command, -1) {
			requireListed("Procfile "+p.name, m[1])
		}
		for _, m := range envRef.FindAllStringSubmatch(p.command, -1) {
			requireListed("Procfile "+p.name, m[1])
		}
	}

	compose := read(t, filepath.Join(root(t), "docker-compose.yml"))
	var inEnvironment bool
	for line := range strings.Lines(compose) {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "environment:") || strings.HasPrefix(line, "x-database-env:") || strings.HasPrefix(line, "x-stripe-env:"):
			inEnvironment = true
			continue
		case trimmed == "" || strings.HasPrefix(trimmed, "#") || strings.HasPrefix(trimmed, "<<:"):
			continue
		}
		m := regexp.MustCompile(`^\s+([A-Z][A-Z0-9_]*):`).FindStringSubmatch(line)
		if !inEnvironment || m == nil {
			inEnvironment = false
			continue
		}
		if strings.HasPrefix(m[1], "POSTGRES_") {
			continue // the postgres image's own
		}
		requireListed("docker-compose.yml", m[1])
	}

	for _, m := range regexp.MustCompile(`(?m)^([A-Z][A-Z0-9_]*)=`).FindAllStringSubmatch(read(t, filepath.Join(root(t), ".env.example")), -1) {
		requireListed(".env.example", m[1])
	}

	// In the README, every UPPER_SNAKE_CASE name, and every NAME= in an
	// example.
	readme := read(t, filepath.Join(root(t), "README.md"))
	for _, m := range regexp.MustCompile(`\b([A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9])\b`).FindAllStringSubmatch(readme, -1) {
		requireListed("README.md", m[1])
	}
	for _, m := range regexp.MustCompile("(?:^|[\\s`(])([A-Z][A-Z0-9_]*)=").FindAllStringSubmatch(readme, -1) {
		if m[1] == "FUZZTIME" || m[1] == "TRACES" {
			continue // make's own: make fuzz FUZZTIME=1m, make dev TRACES=on
		}
		requireListed("README.md", m[1])
	}
}
