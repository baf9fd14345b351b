package clientcheck

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// ProjectClient is one of the project's own clients, as make clientcheck
// and TestProjectClients check it against every case.
type ProjectClient struct {
	Name string
	// Dir is the client's directory, from the repository's root.
	Dir string
	// Build makes the client ready to run, through sh -c in Dir, with
	// $CLIENTCHECK_OUT a directory for what it builds.
	Build string
	// Command is the contract's command (docs/clients.md), through sh -c
	// in Dir, with $CLIENTCHECK_OUT as Build left it.
	Command string
}

// ProjectClients are the clients the project keeps, each passing every
// case. A client in another language is added here, and make clientcheck
// and make test check it from then on.
var ProjectClients = []ProjectClient{
	{
		Name:    "go",
		Dir:     "client",
		Build:   `go build -o "$CLIENTCHECK_OUT/rideapp" ./cmd/rideapp`,
		Command: `"$CLIENTCHECK_OUT/rideapp"`,
	},
	{
		Name: "typescript",
		Dir:  "client-ts",
		// npm ci empties node_modules first: a stamp of the lock file it
		// installed skips it while the lock is unchanged.
		Build: `sum=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ "$(cat node_modules/.installed-lock-sha256 2>/dev/null)" != "$sum" ]; then
	npm ci --no-audit --no-fund --prefer-offline --loglevel=error && echo "$sum" >node_modules/.installed-lock-sha256
fi && npm run --silent build`,
		Command: `node dist/cli.js`,
	},
}

// ProjectClientNamed is the client of ProjectClients called name.
func ProjectClientNamed(name string) (ProjectClient, bool) {
	for _, p := range ProjectClients {
		if p.Name == name {
			return p, true
		}
	}
	return ProjectClient{}, false
}

// Prepare builds p from the repository at root into out, and returns it
// as a Client to Run.
func (p ProjectClient) Prepare(ctx context.Context, root, out string) (Client, error) {
	c := Client{Command: p.Command, Dir: filepath.Join(root, p.Dir), Env: []string{"CLIENTCHECK_OUT=" + out}}
	// A build may write into Dir (node_modules, dist): two test packages
	// preparing one client at once take turns.
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "rocketrides-clientcheck-"+p.Name+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return Client{}, fmt.Errorf("clientcheck: build the %s client: %w", p.Name, err)
	}
	defer lock.Close() // and with it the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return Client{}, fmt.Errorf("clientcheck: build the %s client: lock: %w", p.Name, err)
	}
	build := exec.CommandContext(ctx, "sh", "-c", p.Build)
	build.Dir, build.Env = c.Dir, append(os.Environ(), c.Env...)
	if msg, err := build.CombinedOutput(); err != nil {
		return Client{}, fmt.Errorf("clientcheck: build the %s client (%s): %w\n%s", p.Name, p.Build, err, msg)
	}
	return c, nil
}
