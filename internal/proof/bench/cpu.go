package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuUse is the CPU time the api process and the cluster's processes had
// used at one moment, and how many rides there were: two of them, taken
// around a load, say what one ride cost each side.
type cpuUse struct {
	apiUser, apiSystem time.Duration
	postgres           time.Duration // the postmaster and its children: backends, WAL writer, checkpointer, ...
	// The instruments on the same cores: the Stripe fake, and this
	// process, which is the load's clients.
	fake, load time.Duration
	rides      int64
}

// cpuUse samples r's api and cluster now.
func (r *run) cpuUse(ctx context.Context) (cpuUse, error) { return r.cpuUseOf(ctx, r.apis[0].Pid()) }

// cpuUseOf samples the api process pid and r's cluster now.
func (r *run) cpuUseOf(ctx context.Context, pid int) (cpuUse, error) {
	var u cpuUse
	u.apiUser, u.apiSystem, _ = procCPU(pid)
	if r.fake != nil {
		user, system, _ := procCPU(r.fake.Pid())
		u.fake = user + system
	}
	user, system, _ := procCPU(os.Getpid())
	u.load = user + system
	procs, err := r.cluster.Processes()
	if err != nil {
		return u, err
	}
	for i, pid := range procs {
		user, system, reaped := procCPU(pid)
		u.postgres += user + system
		if i == 0 {
			// The postmaster's reaped children: backends closed and
			// autovacuum workers finished during the load. Without
			// them, a process that exits between two samples takes its
			// CPU out of the total.
			u.postgres += reaped
		}
	}
	if err := r.db.QueryRow(ctx, `SELECT count(*) FROM rides`).Scan(&u.rides); err != nil {
		return u, fmt.Errorf("count rides: %w", err)
	}
	return u, nil
}

// perRide is the CPU each process spent per ride made between u and
// later, and how many rides that was.
func (u cpuUse) perRide(later cpuUse) (per cpuUse) {
	per.rides = later.rides - u.rides
	if per.rides <= 0 {
		return cpuUse{}
	}
	each := func(a, b time.Duration) time.Duration { return (b - a) / time.Duration(per.rides) }
	per.apiUser, per.apiSystem = each(u.apiUser, later.apiUser), each(u.apiSystem, later.apiSystem)
	per.postgres, per.fake, per.load = each(u.postgres, later.postgres), each(u.fake, later.fake), each(u.load, later.load)
	return per
}

// clockTick is the unit of /proc/<pid>/stat's CPU times: USER_HZ, which
// Linux fixes at 100 on every architecture Go runs on.
const clockTick = 10 * time.Millisecond

// procCPU is the user and system CPU time process pid has used, and the
// user and system time of its children that exited and were waited for,
// from /proc/<pid>/stat; zero if it cannot be read.
func procCPU(pid int) (user, system, reaped time.Duration) {
	f := statFields(pid)
	if len(f) < 15 {
		return 0, 0, 0
	}
	// statFields starts at the third field, state: utime and stime are
	// the 14th and 15th, cutime and cstime the 16th and 17th.
	tick := func(i int) time.Duration {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(n) * clockTick
	}
	return tick(11), tick(12), tick(13) + tick(14)
}

// statFields is /proc/<pid>/stat from its third field on: the second,
// the command name in parentheses, may itself hold spaces.
func statFields(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(data)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

// profile writes a CPU profile of the first api over the next d to
// Config.Profile, if that is set: to a file beside it, renamed into place
// once whole.
func (r *run) profile(ctx context.Context, d time.Duration) error {
	if r.cfg.Profile == "" {
		return nil
	}
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", r.debugAddr, int(d.Seconds()))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile the api: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile the api: %s", resp.Status)
	}
	f, err := createBeside(r.cfg.Profile)
	if err != nil {
		return fmt.Errorf("write the profile: %w", err)
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	_, err = io.Copy(f, resp.Body)
	if err = errors.Join(err, f.Close()); err == nil {
		err = os.Rename(f.Name(), r.cfg.Profile)
	}
	if err != nil {
		return fmt.Errorf("write the profile to %s: %w", r.cfg.Profile, err)
	}
	return nil
}

// canWrite reports whether a file can be written at path, without
// touching one that is there: it creates and removes the file beside it
// that a write would create (createBeside).
func canWrite(path string) error {
	// A directory passes the trial below, and the rename onto it, at the
	// end of the run, fails.
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		return &fs.PathError{Op: "open", Path: path, Err: syscall.EISDIR}
	}
	f, err := createBeside(path)
	if err != nil {
		var pathErr *fs.PathError
		if errors.As(err, &pathErr) {
			err = pathErr.Err
		}
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return errors.Join(f.Close(), os.Remove(f.Name()))
}

// createBeside creates a hidden file in path's directory, named after
// it: written there and renamed onto path once whole, it never leaves
// path half-written.
func createBeside(path string) (*os.File, error) {
	return os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
}
