package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cpuUse is the CPU time the api process and the cluster's processes had
// used at one moment, and how many rides there were: two of them, taken
// around a load, say what one ride cost each side.
type cpuUse struct {
	apiUser, apiSystem time.Duration
	postgres           time.Duration // the postmaster and its children: backends, WAL writer, checkpointer, ...
	rides              int64
}

// cpuUse samples r's api and cluster now.
func (r *run) cpuUse(ctx context.Context) (cpuUse, error) {
	var u cpuUse
	u.apiUser, u.apiSystem = procCPU(r.apis[0].Pid())
	for _, pid := range clusterPids(r.cluster.DataDir) {
		user, system := procCPU(pid)
		u.postgres += user + system
	}
	if err := r.db.QueryRow(ctx, `SELECT count(*) FROM rides`).Scan(&u.rides); err != nil {
		return u, fmt.Errorf("count rides: %w", err)
	}
	return u, nil
}

// perRide is the CPU each side spent per ride made between u and later.
func (u cpuUse) perRide(later cpuUse) (apiUser, apiSystem, postgres time.Duration, rides int64) {
	rides = later.rides - u.rides
	if rides <= 0 {
		return 0, 0, 0, 0
	}
	per := func(d time.Duration) time.Duration { return d / time.Duration(rides) }
	return per(later.apiUser - u.apiUser), per(later.apiSystem - u.apiSystem), per(later.postgres - u.postgres), rides
}

// clockTick is the unit of /proc/<pid>/stat's CPU times: USER_HZ, which
// Linux fixes at 100 on every architecture Go runs on.
const clockTick = 10 * time.Millisecond

// procCPU is the user and system CPU time process pid has used, from
// /proc/<pid>/stat; zero if it cannot be read.
func procCPU(pid int) (user, system time.Duration) {
	f := statFields(pid)
	if len(f) < 13 {
		return 0, 0
	}
	// statFields starts at the third field, state: utime and stime are
	// the 14th and 15th.
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u) * clockTick, time.Duration(s) * clockTick
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

// clusterPids is the postmaster of the cluster in dataDir and its
// children; none if dataDir is "" (a cluster the bench did not start).
func clusterPids(dataDir string) []int {
	if dataDir == "" {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return nil
	}
	postmaster, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0]))
	if err != nil {
		return nil
	}
	pids := []int{postmaster}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil {
			continue
		}
		if f := statFields(pid); len(f) > 1 && f[1] == strconv.Itoa(postmaster) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// profile writes a CPU profile of the first api over the next d to
// Config.Profile, if that is set.
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
	f, err := os.Create(r.cfg.Profile)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	return errors.Join(err, f.Close())
}

// freeAddr is a loopback address with a port nothing listens on.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
