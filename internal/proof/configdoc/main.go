// Command configdoc writes docs/configuration.md, the reference of every
// setting of every Rocket Rides process; .env.example, the same settings
// as an environment file with their defaults; the list of the
// project's setting names in internal/platform/config/known.go, which
// every process checks its environment against; and docs/errors.md, every
// problem code the API answers with, from problem.Codes. Run it with `make docs`
// (or go generate ./docs); its test fails when any of them and the code
// disagree.
//
// A process's settings are what it reads, not a list kept by hand: each
// command that runs through process.Main is built and asked with
// -settings, which runs its build step with config.Describe. The other
// commands' settings, and those make dev sets for the Procfile, come from
// the packages that declare them.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/platform/failpoint"
	"github.com/rocketrides/rocketrides/internal/platform/problem"
	"github.com/rocketrides/rocketrides/internal/platform/project"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet"
	"github.com/rocketrides/rocketrides/internal/user"
)

// makeDev are the variables the Makefile exports for the Procfile, which
// maps them onto the processes' own (API_PORT becomes the api's PORT).
// Every process sees them in make dev, so they are the project's names.
var makeDev = config.Declare(
	config.Setting{Name: "API_HOST", Type: config.TypeHost, Help: "make dev: the api's HOST"},
	config.Setting{Name: "API_PORT", Type: config.TypePort, Zero: "any free port", Help: "make dev: the api's PORT, and the port of the simulator's API_URL"},
	config.Setting{Name: "API_METRICS_ADDR", Type: config.TypeAddress, Help: "make dev: the api's METRICS_ADDR"},
	config.Setting{Name: "FAKESTRIPE_HOST", Type: config.TypeHost, Help: "make dev: the Stripe fake's HOST"},
	config.Setting{Name: "CONSOLE_HOST", Type: config.TypeHost, Help: "make dev: the console's HOST"},
	config.Setting{Name: "CONSOLE_PORT", Type: config.TypePort, Zero: "any free port", Help: "make dev: the console's PORT, and the port of the URL make dev prints"},
	config.Setting{Name: "FAKESTRIPE_PORT", Type: config.TypePort, Zero: "any free port", Help: "make dev: the Stripe fake's PORT, and the port of STRIPE_API_BASE"},
	config.Setting{Name: "JAEGER_OTLP_GRPC_PORT", Type: config.TypePort, Zero: "any free port", Help: "make dev TRACES=on: where Jaeger receives OTLP over gRPC, the port of every process's OTEL_EXPORTER_OTLP_ENDPOINT"},
	config.Setting{Name: "JAEGER_OTLP_HTTP_PORT", Type: config.TypePort, Zero: "any free port", Help: "make dev TRACES=on: where Jaeger receives OTLP over HTTP (http/protobuf)"},
	config.Setting{Name: "JAEGER_UI_PORT", Type: config.TypePort, Zero: "any free port", Help: "make dev TRACES=on: Jaeger's query API (/api/traces/{trace_id}), the port of the console's CONSOLE_TRACE_URL"},
	config.Setting{Name: "JAEGER_QUERY_GRPC_PORT", Type: config.TypePort, Zero: "any free port", Help: "make dev TRACES=on: Jaeger's query API over gRPC"},
)

// section is a heading and the settings under it.
type section struct {
	name, intro string
	reads       []config.Read
}

func main() {
	root, err := project.Root()
	if err == nil {
		var files map[string][]byte
		if files, err = generate(root); err == nil {
			for path, content := range files {
				if err = os.WriteFile(filepath.Join(root, path), content, 0o644); err != nil {
					break
				}
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "configdoc:", err)
		os.Exit(1)
	}
}

const (
	docPath    = "docs/configuration.md"
	envPath    = ".env.example"
	knownPath  = "internal/platform/config/known.go"
	errorsPath = "docs/errors.md"
)

// generate returns docs/configuration.md, .env.example and known.go as
// they should be, by path.
func generate(root string) (map[string][]byte, error) {
	processes, err := describeProcesses(root)
	if err != nil {
		return nil, err
	}
	logging := declared(config.Variables[:2]...)
	others := []section{
		{name: "seed", intro: "`cmd/seed` creates the demo users (`make dev` runs it before the api); its flags `-token` and `-bad-source-token` win over the variables.",
			reads: slices.Concat(logging, declared(db.Variables[0]), declared(payment.Variables...), declared(user.Variables...))},
		{name: "migrate", intro: "`cmd/migrate up|down|version` applies the schema.", reads: slices.Concat(logging, declared(db.Variables[0]))},
		{name: "localpg, make dev and make test", intro: "The project-local Postgres cluster, the tests, and the test builds.",
			reads: slices.Concat(declared(localpg.Variables...), declared(dbtest.Variables...), declared(failpoint.Variables...))},
		{name: "make dev", intro: "The Makefile exports these to every process it starts; the Procfile maps them onto each process's own settings. A process accepts them though it does not read them.",
			reads: declared(makeDev...)},
	}
	defaults := map[string]string{"API_HOST": "127.0.0.1", "API_PORT": "5000", "API_METRICS_ADDR": "127.0.0.1:9100", "FAKESTRIPE_HOST": "127.0.0.1", "FAKESTRIPE_PORT": "12111", "CONSOLE_HOST": "127.0.0.1", "CONSOLE_PORT": "5050",
		"JAEGER_OTLP_GRPC_PORT": "4317", "JAEGER_OTLP_HTTP_PORT": "4318", "JAEGER_UI_PORT": "16686", "JAEGER_QUERY_GRPC_PORT": "16685",
		"SEED_USER_TOKEN": "[redacted]", "SEED_BAD_SOURCE_TOKEN": "[redacted]", "LOG_LEVEL": "info", "LOG_FORMAT": "text", "LOCALPG_PORT": strconv.Itoa(localpg.DefaultPort)}
	for i := range others {
		for j := range others[i].reads {
			others[i].reads[j].Default = defaults[others[i].reads[j].Name]
		}
	}

	var names []string
	for _, s := range slices.Concat(processes, others) {
		for _, r := range s.reads {
			names = append(names, r.Name)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	known, err := knownFile(names)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		docPath:    reference(processes, others),
		envPath:    envExample(processes, others),
		knownPath:  known,
		errorsPath: errorsReference(),
	}, nil
}

// errorsReference is docs/errors.md: every problem code, from
// problem.Codes, under a heading its type's fragment finds.
func errorsReference() []byte {
	var b bytes.Buffer
	b.WriteString(`# Error codes

<!-- Written by make docs from problem.Codes (internal/platform/problem/codes.go); edit there. -->

Every error answer of the API is a problem (RFC 9457, ` + "`application/problem+json`" + `)
with a stable ` + "`code`" + `, which clients branch on, and a ` + "`type`" + ` that points here:
` + "`<PROBLEM_TYPE_BASE>#<code>`" + `. The default base, ` + "`" + problem.DefaultTypeBase + "`" + `, is relative: it resolves
against the api's own URL, whose ` + "`GET /errors`" + ` serves this page. An operator who
publishes the docs elsewhere sets ` + "`PROBLEM_TYPE_BASE`" + ` (docs/configuration.md).

Whether to retry is the ` + "`Rocket-Rides-Should-Retry`" + ` header's word (docs/clients.md):
a retry always reuses the request's ` + "`Idempotency-Key`" + `.
`)
	for _, c := range problem.Codes {
		statuses := make([]string, len(c.Statuses))
		for i, s := range c.Statuses {
			statuses[i] = fmt.Sprintf("%d %s", s, problem.Title(s))
		}
		fmt.Fprintf(&b, "\n## %s\n\n%s. %s\n", c.Code, strings.Join(statuses, ", "), c.Meaning)
	}
	return b.Bytes()
}

// declared are settings as read with no default.
func declared(settings ...config.Setting) []config.Read {
	reads := make([]config.Read, len(settings))
	for i, s := range settings {
		reads[i] = config.Read{Setting: s}
	}
	return reads
}

// describeProcesses builds every command that runs through process.Main
// and asks each for its settings.
func describeProcesses(root string) ([]section, error) {
	bins, err := fleet.Build()
	if err != nil {
		return nil, err
	}
	mains, err := filepath.Glob(filepath.Join(root, "cmd", "*", "main.go"))
	if err != nil {
		return nil, err
	}
	var out []section
	for _, m := range mains {
		src, err := os.ReadFile(m)
		if err != nil {
			return nil, err
		}
		if !bytes.Contains(src, []byte("process.Main(")) {
			continue
		}
		name := filepath.Base(filepath.Dir(m))
		cmd := exec.Command(filepath.Join(bins.Dir, name), "-settings")
		// Nothing from this environment: -settings reads none of it,
		// and a stray variable must not stop the command.
		cmd.Env = []string{}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s -settings: %w: %s", name, err, stderr.String())
		}
		var reads []config.Read
		if err := json.Unmarshal(b, &reads); err != nil {
			return nil, fmt.Errorf("%s -settings: %w", name, err)
		}
		out = append(out, section{name: name, intro: fmt.Sprintf("`%s -help` lists the same.", name), reads: reads})
	}
	order := []string{"api", "completer", "enqueuer", "worker", "reaper", "reconciler", "console", "fakestripe", "simulator"}
	slices.SortStableFunc(out, func(a, b section) int {
		ia, ib := slices.Index(order, a.name), slices.Index(order, b.name)
		if ia < 0 {
			ia = len(order)
		}
		if ib < 0 {
			ib = len(order)
		}
		return ia - ib
	})
	return out, nil
}

// prefixes are the project's prefixes as the reference lists them.
func prefixes() string {
	var words []string
	for _, p := range config.Prefixes() {
		words = append(words, "`"+p+"`")
	}
	return strings.Join(words, ", ")
}

// failuresLink is a setting's Failures, "<section of docs/failures.md>
// (<what in it>)", with the section linked by its heading's anchor, as
// GitHub makes it (the docs' test checks that it lands).
func failuresLink(failures string) string {
	section, detail, _ := strings.Cut(failures, " (")
	var anchor strings.Builder
	for _, r := range strings.ToLower(section) {
		switch {
		case r == ' ':
			anchor.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			anchor.WriteRune(r)
		}
	}
	link := fmt.Sprintf("[%s](failures.md#%s)", section, anchor.String())
	if detail != "" {
		link += " (" + detail
	}
	return link
}

// cell escapes s for a Markdown table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func reference(processes, others []section) []byte {
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Configuration\n\n")
	p("<!-- Generated by `make docs` (go run ./internal/proof/configdoc) from the settings' declarations\n")
	p("     and what each process reads. Do not edit: TestReferenceIsCurrent fails when it and the code disagree. -->\n\n")
	p("Every setting is an environment variable, declared once (`config.Declare`) in the package\n")
	p("whose behaviour it changes. Each process's `-help` lists the settings it reads, with the\n")
	p("same text as this page.\n\n")
	p("- An unset or empty variable takes its default. Durations are Go durations (`90s`, `5m`, `72h`).\n")
	p("- A `0` is refused, naming the variable, unless the setting says what `0` means; negative\n")
	p("  numbers and durations, and values such as `5 minutes`, are always refused.\n")
	p("- An address is `host:port` (`127.0.0.1:9100`, `:9100`), a URL has a scheme and a host\n")
	p("  (`http://127.0.0.1:5000`), and a connection string is a `postgres://` URL or `key=value` pairs;\n")
	p("  any other form is refused at start, naming the variable, with a password in it masked.\n")
	p("- A non-empty variable with one of the project's own prefixes that no process defines stops the\n")
	p("  process at start, naming the nearest setting (`REAPER_MAX_AGES is not a setting of any Rocket\n")
	p("  Rides process; did you mean REAPER_MAX_AGE?`). The prefixes are words only this project uses:\n")
	p("  %s.\n", prefixes())
	p("  A variable another process reads is fine, so one environment can serve them all, and so is one\n")
	p("  whose first word other software uses too (`DATABASE_PASSWORD`, `API_KEY`, `STRIPE_WEBHOOK_SECRET`).\n")
	p("  Where the environment is shared with software that uses the project's prefixes,\n")
	p("  `ALLOW_UNKNOWN_SETTINGS=true` starts anyway and logs each at WARN.\n")
	p("- At start each process logs one `Started` line with every setting in effect, secrets redacted\n")
	p("  (`STRIPE_API_KEY` and tokens as `[redacted]`, the password in `DATABASE_URL` and `SMTP_URL` as `xxxxx`).\n\n")

	p("## Settings that change a guarantee\n\n")
	p("| setting | read by | what it trades | docs/failures.md |\n| --- | --- | --- | --- |\n")
	seen := map[string]bool{}
	for _, s := range processes {
		for _, r := range s.reads {
			if r.Trades == "" || seen[r.Name] {
				continue
			}
			seen[r.Name] = true
			var by []string
			for _, s := range processes {
				if slices.ContainsFunc(s.reads, func(o config.Read) bool { return o.Name == r.Name }) {
					by = append(by, s.name)
				}
			}
			p("| `%s` | %s | %s | %s |\n", r.Name, strings.Join(by, ", "), cell(r.Trades), cell(failuresLink(r.Failures)))
		}
	}
	p("\n")
	for _, s := range slices.Concat(processes, others) {
		p("## %s\n\n%s\n\n", s.name, s.intro)
		p("| variable | type | default | what it changes |\n| --- | --- | --- | --- |\n")
		for _, r := range s.reads {
			def := "`" + r.Default + "`"
			switch {
			case r.Required:
				def = "required"
			case r.Default == "":
				def = "unset"
			}
			typ := string(r.Type)
			if r.Unit != "" {
				typ += " (" + r.Unit + ")"
			}
			help := r.Help
			if r.Zero != "" {
				help += "; `0`: " + r.Zero
			}
			if r.Secret {
				help += " (secret: never logged)"
			}
			if r.Trades != "" {
				help += " (changes a guarantee, above)"
			}
			p("| `%s` | %s | %s | %s |\n", r.Name, typ, cell(def), cell(help))
		}
		p("\n")
	}
	return b.Bytes()
}

// envExample is every setting once, under the first process that reads
// it, as NAME=default with its help above it: a file to copy to .env and
// edit. Secrets are left empty.
func envExample(processes, others []section) []byte {
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Every setting of every Rocket Rides process, with its default.\n")
	p("# Generated by `make docs` from the settings' declarations, like docs/configuration.md,\n")
	p("# which says more about each; do not edit (TestReferenceIsCurrent fails when it is stale).\n")
	p("# make dev works with none of them set. An empty setting takes its default; 0 is refused,\n")
	p("# naming the setting, unless its comment says what 0 means.\n")
	seen := map[string]bool{}
	for _, s := range slices.Concat(processes, others) {
		var lines []string
		for _, r := range s.reads {
			if seen[r.Name] {
				continue
			}
			seen[r.Name] = true
			help := r.Help
			if r.Zero != "" {
				help += "; 0: " + r.Zero
			}
			if r.Required {
				help += " (required)"
			}
			def := r.Default
			if r.Secret || strings.HasPrefix(def, "[") {
				def = ""
				help += " (secret)"
			}
			lines = append(lines, fmt.Sprintf("# %s\n%s=%s\n", help, r.Name, def))
		}
		if len(lines) == 0 {
			continue
		}
		p("\n# --- %s ---\n%s", s.name, strings.Join(lines, ""))
	}
	return b.Bytes()
}

// knownFile is known.go listing names.
func knownFile(names []string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("// Code generated by internal/proof/configdoc; DO NOT EDIT.\n\npackage config\n\n")
	b.WriteString("// projectSettings are the settings of every process of the project: what\n// Unknown accepts, whichever process checks.\nvar projectSettings = []string{\n")
	for _, n := range names {
		fmt.Fprintf(&b, "\t%q,\n", n)
	}
	b.WriteString("}\n")
	return format.Source(b.Bytes())
}
