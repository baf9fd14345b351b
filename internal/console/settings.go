package console

import (
	"net"
	"strings"

	"github.com/rocketrides/rocketrides/internal/operator"
	"github.com/rocketrides/rocketrides/internal/platform/config"
)

// Variables are the console's own settings (cmd/console). It also reads
// the api's settings for the ride service it acts through, HOST and PORT
// for its listener, and SIMULATED_ERRORS for the lab. It has no password
// setting: people log in to their own accounts (console operator add).
var Variables = config.Declare(
	config.Setting{Name: "CONSOLE_TRUST_PROXY", Type: config.TypeBool,
		Help: "true: believe X-Forwarded-Proto and the last address of X-Forwarded-For, as the reverse proxy that browsers reach the console through sets them (https there: a Secure cookie, and only an https Origin may post; the address: what a login is throttled and logged by, and what a settlement's audit record names); leave it false where browsers reach the console directly"},
	config.Setting{Name: "CONSOLE_HOSTS", Type: config.TypeString,
		Help: "comma-separated host names (with :port where it is not the scheme's default) that browsers reach the console by through a reverse proxy, such as console.example.com; the console answers only to these and to its own listen address (and localhost on its port when that is loopback), and refuses any other Host 421, so that a page whose name resolves to the console's address (DNS rebinding) reaches nothing"},
	config.Setting{Name: "CONSOLE_API_URL", Type: config.TypeURL,
		Help: "the api's base URL, where the lab sends its rides (SIMULATED_ERRORS=true only)"},
	config.Setting{Name: "CONSOLE_LAB_TOKEN", Type: config.TypeString, Secret: true,
		Help: "the API token the lab sends rides with; unset: SEED_USER_TOKEN, else the seed's dev token of user@example.com"},
	config.Setting{Name: "CONSOLE_LAB_TIMEOUT", Type: config.TypeDuration,
		Help: "the lab's client timeout per attempt, as a mobile app's"},
	config.Setting{Name: "CONSOLE_TRACE_URL", Type: config.TypeURL,
		Help: "the address of a request's trace in a trace viewer, with {trace_id} where its id goes (http://127.0.0.1:16686/trace/{trace_id} for Jaeger's UI): each request's story links to the trace of the request that claimed its key; unset, no link (make dev TRACES=on sets its Jaeger's /api/traces/{trace_id})"},
	config.Setting{Name: "CONSOLE_LOGIN_FIRST_WAIT", Type: config.TypeDuration, Max: operator.DefaultMaxWait,
		Help: "how long a login waits after five failed in a row at its account or from its address, doubling with each further failure up to 15m; at most 15m"},
)

// HostsFromEnv reads CONSOLE_HOSTS: the names a proxy in front of the
// console serves it by, each a host name or host:port, refused by name
// when one is not (a URL, say).
func HostsFromEnv(env *config.Env) []string {
	var hosts []string
	for _, h := range strings.Split(env.String("CONSOLE_HOSTS", ""), ",") {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		name, _, err := net.SplitHostPort(h)
		if err != nil {
			name = h
		}
		if strings.ContainsAny(name, "/@:[] ") || name == "" {
			env.Refuse("CONSOLE_HOSTS", "each entry must be a host name or host:port, as a browser's Host header has it (console.example.com), not "+h)
			continue
		}
		hosts = append(hosts, h)
	}
	return hosts
}

// TraceIDPlaceholder is where CONSOLE_TRACE_URL puts a trace's id.
const TraceIDPlaceholder = "{trace_id}"

// TraceURLFromEnv reads CONSOLE_TRACE_URL, refused by name when it has no
// place for the trace's id.
func TraceURLFromEnv(env *config.Env) string {
	u := env.String("CONSOLE_TRACE_URL", "")
	if u != "" && !strings.Contains(u, TraceIDPlaceholder) {
		env.Refuse("CONSOLE_TRACE_URL", "must have "+TraceIDPlaceholder+" where the trace's id goes, such as http://127.0.0.1:16686/trace/"+TraceIDPlaceholder)
		return ""
	}
	return u
}
