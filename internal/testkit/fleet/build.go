package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rocketrides/rocketrides/internal/platform/project"
)

// buildTimeout bounds the build of every command on a cold cache: a fresh
// checkout compiles River, pgx, stripe-go and Toxiproxy first, on a
// machine that compiles the test binaries beside it. It stays inside make
// test's 9m, which would otherwise end the package first, unexplained.
const buildTimeout = 8 * time.Minute

// Binaries are the project's commands, built with -tags failpoints so that
// FAILPOINTS=name=kill in a process's environment can crash it at a seam.
type Binaries struct {
	// Dir holds one executable per command, named after its cmd/ folder.
	Dir string

	// cmds are the commands under cmd/.
	cmds []string

	// errs holds the build error of each command that exists in cmd/ but
	// does not compile. Such a command fails only the tests that start
	// it, with its compiler output, not every test of the binary.
	errs map[string]error
}

var (
	buildOnce sync.Once
	buildVal  *Binaries
	buildErr  error
)

// Build compiles every command under cmd/ into .data/fleet/bin in the
// module root, once per process: every fleet in a test binary shares the
// result. The directory is kept between runs on purpose. Linking a dozen
// binaries afresh takes 15-20s on a small machine, once per test binary;
// go build leaves an up-to-date binary alone, so a kept directory makes
// the build take a fraction of a second unless the code changed. Test
// binaries running at the same time take turns on a lock, so the first
// builds and the others find its work done.
func Build() (*Binaries, error) {
	buildOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		buildVal, buildErr = build(ctx)
	})
	return buildVal, buildErr
}

func build(ctx context.Context) (*Binaries, error) {
	root, err := project.Root()
	if err != nil {
		return nil, err
	}
	goTool, err := goCommand()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, ".data", "fleet", "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create directory for binaries: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(root, ".data", "fleet", "build.lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	cmds, err := commands(root)
	if err != nil {
		return nil, err
	}
	b := &Binaries{Dir: dir, cmds: cmds, errs: map[string]error{}}

	// One go build for all commands links them in parallel and shares the
	// compiled packages.
	if _, err := goBuild(ctx, goTool, root, dir, "./cmd/..."); err == nil {
		return b, nil
	}
	// Something under cmd/ does not compile. Build the commands one by
	// one so that the others are still usable, and remember each failure:
	// a binary left from an earlier build must not stand in for code that
	// no longer compiles.
	for _, name := range cmds {
		if out, err := goBuild(ctx, goTool, root, dir, "./cmd/"+name); err != nil {
			b.errs[name] = fmt.Errorf("build cmd/%s: %w\n%s", name, err, out)
		}
	}
	if len(b.errs) == len(cmds) {
		return nil, fmt.Errorf("no command under %s/cmd builds; the first: %w", root, b.errs[cmds[0]])
	}
	return b, nil
}

// lockFile takes an exclusive flock on path, polling so that ctx can end
// the wait. The kernel releases it if this process dies.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open build lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("wait for build lock %s: %w", path, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func goBuild(ctx context.Context, goTool, root, dir, pkgs string) (string, error) {
	cmd := exec.CommandContext(ctx, goTool, "build", "-tags", "failpoints", "-o", dir+string(filepath.Separator), pkgs)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

// commands lists the folders under cmd/ that hold a main package.
func commands(root string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(root, "cmd"))
	if err != nil {
		return nil, fmt.Errorf("list commands: %w", err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if main, _ := filepath.Glob(filepath.Join(root, "cmd", e.Name(), "*.go")); len(main) > 0 {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}

// goCommand finds the go tool: the one on PATH, else the one of the
// toolchain that built this program.
func goCommand() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	// Tests and tools run on the machine that built them, where the
	// toolchain's root still means something.
	p := filepath.Join(runtime.GOROOT(), "bin", "go") //nolint:staticcheck // see above
	if _, err := os.Stat(p); err != nil {
		return "", errors.New("find the go command: not on PATH and not in GOROOT")
	}
	return p, nil
}

// Path is the executable of command name.
func (b *Binaries) Path(name string) string {
	return filepath.Join(b.Dir, name)
}

// Has reports whether command name exists and was built. Optional
// commands (one still being written, say) are looked up with it before
// they are started.
func (b *Binaries) Has(name string) bool {
	if !slices.Contains(b.cmds, name) || b.errs[name] != nil {
		return false
	}
	info, err := os.Stat(b.Path(name))
	return err == nil && !info.IsDir()
}

// Err is why command name cannot be started: its build failure, or that
// it does not exist.
func (b *Binaries) Err(name string) error {
	if err := b.errs[name]; err != nil {
		return err
	}
	if !b.Has(name) {
		return fmt.Errorf("no command %q: cmd/%s does not exist", name, name)
	}
	return nil
}
