package deploy_test

import (
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// TestComposeHA checks docker-compose.ha.yml: valid by the compose
// specification, the app's services as docker-compose.yml runs them with
// the database behind HAProxy, and a Patroni cluster configured to keep
// the guarantee an acknowledged ride rests on.
func TestComposeHA(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		main, ha *types.Project
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{
			main: loadCompose(t, "docker-compose.yml", "rocketrides"),
			ha:   loadCompose(t, "docker-compose.ha.yml", "rocketrides-ha"),
		}
	}
	service := func(t *testing.T, p *types.Project, name string) types.ServiceConfig {
		t.Helper()
		s, err := p.GetService(name)
		require.NoError(t, err, "docker-compose.ha.yml has no service %s", name)
		return s
	}
	patroniNodes := func(p *types.Project) []string {
		var out []string
		for name := range p.Services {
			if strings.HasPrefix(name, "patroni") {
				out = append(out, name)
			}
		}
		slices.Sort(out)
		return out
	}

	// Every service of the app, its command, settings, ports, volumes and
	// waits, as in docker-compose.yml, but for the database: the HA file
	// cannot drift from the one the other tests check.
	t.Run("RunsTheAppAsDockerComposeYmlDoes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		apps := 0
		for _, s := range b.main.Services {
			if s.Build == nil {
				continue // postgres
			}
			apps++
			h := service(t, b.ha, s.Name)
			require.Equal(t, s.Image, h.Image, "service %s", s.Name)
			require.Equal(t, s.Command, h.Command, "service %s", s.Name)
			require.Equal(t, s.Restart, h.Restart, "service %s", s.Name)
			require.Equal(t, s.Ports, h.Ports, "service %s", s.Name)
			require.Equal(t, s.Volumes, h.Volumes, "service %s", s.Name)
			want := maps.Clone(s.Environment)
			if v, ok := want["DATABASE_URL"]; ok {
				u, err := url.Parse(*v)
				require.NoError(t, err)
				got := h.Environment["DATABASE_URL"]
				require.NotNil(t, got, "service %s", s.Name)
				hu, err := url.Parse(*got)
				require.NoError(t, err)
				require.Equal(t, "haproxy", hu.Hostname(), "service %s reaches the primary through HAProxy", s.Name)
				require.Equal(t, u.Path, hu.Path, "service %s: the same database", s.Name)
				delete(want, "DATABASE_URL")
			}
			got := maps.Clone(h.Environment)
			delete(got, "DATABASE_URL")
			require.Equal(t, want, got, "service %s", s.Name)
			for name, d := range s.DependsOn {
				if name == "postgres" {
					require.Equal(t, types.ServiceConditionHealthy, h.DependsOn["haproxy"].Condition,
						"service %s waits for HAProxy to reach a primary", s.Name)
					continue
				}
				require.Equal(t, d.Condition, h.DependsOn[name].Condition, "service %s waits for %s", s.Name, name)
			}
		}
		require.Equal(t, len(processes)+2, apps, "every process, migrate and seed")
		_, err := b.ha.GetService("postgres")
		require.Error(t, err, "no single postgres beside the cluster")
	})

	t.Run("URLsNameServices", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, s := range b.ha.Services {
			for name, v := range s.Environment {
				if v == nil {
					continue
				}
				u, err := url.Parse(*v)
				if err != nil || u.Host == "" || u.Hostname() == "0.0.0.0" { // a listener's, not an address
					continue
				}
				_, err = b.ha.GetService(u.Hostname())
				require.NoError(t, err, "service %s: %s=%s names no service", s.Name, name, *v)
			}
		}
	})

	t.Run("RunsThreePatroniNodesOnThreeEtcdMembers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		nodes := patroniNodes(b.ha)
		require.Len(t, nodes, 3)
		for _, name := range nodes {
			s := service(t, b.ha, name)
			require.Equal(t, name, *s.Environment["PATRONI_NAME"])
			require.Equal(t, name+":5432", *s.Environment["PATRONI_POSTGRESQL_CONNECT_ADDRESS"])
			require.Equal(t, name+":8008", *s.Environment["PATRONI_RESTAPI_CONNECT_ADDRESS"])
			require.NotNil(t, s.HealthCheck, "service %s", name)
			require.Len(t, s.Volumes, 1, "service %s keeps its data on a volume of its own", name)
			require.Equal(t, name, s.Volumes[0].Source)
		}
		var members []string
		for name := range b.ha.Services {
			if strings.HasPrefix(name, "etcd") {
				members = append(members, name)
			}
		}
		require.Len(t, members, 3, "etcd keeps a quorum through the loss of one member")
	})

	t.Run("PatroniKeepsAcknowledgedCommits", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cfg, ok := b.ha.Configs["patroni"]
		require.True(t, ok)
		var c patroniConfig
		require.NoError(t, yaml.Unmarshal([]byte(cfg.Content), &c))
		dcs := c.Bootstrap.DCS
		require.True(t, dcs.Sync, "only a synchronous standby may be promoted")
		require.Equal(t, "on", dcs.Postgres.Parameters["synchronous_commit"])
		require.True(t, dcs.Postgres.UsePgRewind, "an old primary rejoins as a standby by itself")
		require.Positive(t, dcs.TTL)
		require.LessOrEqual(t, dcs.LoopWait+2*dcs.RetryTimeout, dcs.TTL, "Patroni's rule, which 3.0 does not enforce")
		require.ElementsMatch(t, []string{"etcd1:2379", "etcd2:2379", "etcd3:2379"}, c.Etcd3.Hosts)

		// The first leader creates the app's database, with a script
		// every node has where post_init says.
		for _, name := range patroniNodes(b.ha) {
			configs := service(t, b.ha, name).Configs
			i := slices.IndexFunc(configs, func(sc types.ServiceConfigObjConfig) bool { return sc.Source == "patroni-post-init" })
			require.GreaterOrEqual(t, i, 0, "service %s", name)
			require.Equal(t, c.Bootstrap.PostInit, configs[i].Target, "service %s", name)
			require.NotNil(t, configs[i].Mode, "service %s", name)
			require.NotZero(t, *configs[i].Mode&0o111, "service %s: post_init must be executable", name)
		}
		script := b.ha.Configs["patroni-post-init"].Content
		require.Contains(t, script, `psql "$1"`, "compose's $$ is a literal $")
		require.Contains(t, script, "CREATE DATABASE rocketrides")
	})

	t.Run("HAProxyRoutesToThePrimary", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cfg := b.ha.Configs["haproxy"].Content
		require.Contains(t, cfg, "option httpchk GET /primary")
		require.Contains(t, cfg, "on-marked-down shutdown-sessions", "sessions on a demoted node are cut")
		for _, name := range patroniNodes(b.ha) {
			require.Regexp(t, regexp.MustCompile(fmt.Sprintf(`(?m)^\s*server %s %s:5432 check port 8008$`, name, name)), cfg)
		}
		h := service(t, b.ha, "haproxy")
		require.NotNil(t, h.HealthCheck)
		require.Contains(t, strings.Join(h.HealthCheck.Test, " "), "/ready")
		require.Equal(t, types.ServiceConditionHealthy, service(t, b.ha, "migrate").DependsOn["haproxy"].Condition)
	})

	// docs/deployment.md's production configuration is YAML Patroni
	// reads, with the settings its text explains.
	t.Run("DocumentedConfigurationKeepsTheGuarantee", func(t *testing.T) {
		t.Parallel()
		doc := read(t, filepath.Join(root(t), "docs", "deployment.md"))
		m := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindStringSubmatch(doc)
		require.NotNil(t, m, "docs/deployment.md has no yaml block")
		var c patroniConfig
		require.NoError(t, yaml.Unmarshal([]byte(m[1]), &c))
		dcs := c.Bootstrap.DCS
		require.True(t, dcs.Sync)
		require.True(t, dcs.Postgres.UsePgRewind)
		require.LessOrEqual(t, dcs.LoopWait+2*dcs.RetryTimeout, dcs.TTL)
		require.Equal(t, "required", c.Watchdog.Mode, "the old primary is fenced")
	})
}

// patroniConfig is what the tests read of a Patroni configuration: the
// compose file's and docs/deployment.md's.
type patroniConfig struct {
	Etcd3 struct {
		Hosts []string `yaml:"hosts"`
	} `yaml:"etcd3"`
	Bootstrap struct {
		DCS struct {
			TTL          int  `yaml:"ttl"`
			LoopWait     int  `yaml:"loop_wait"`
			RetryTimeout int  `yaml:"retry_timeout"`
			Sync         bool `yaml:"synchronous_mode"`
			Postgres     struct {
				UsePgRewind bool              `yaml:"use_pg_rewind"`
				Parameters  map[string]string `yaml:"parameters"`
			} `yaml:"postgresql"`
		} `yaml:"dcs"`
		PostInit string `yaml:"post_init"`
	} `yaml:"bootstrap"`
	Watchdog struct {
		Mode string `yaml:"mode"`
	} `yaml:"watchdog"`
}
