package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the unit of the CPU times in /proc/<pid>/stat (USER_HZ),
// 100 on every Linux architecture Go runs on.
const clockTicks = 100

// procCPU is the CPU time (user and system) process pid has used, and,
// with children, the CPU time of its children that have exited and been
// waited for: how a server's finished connections are still counted.
func procCPU(pid int, children bool) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	// fields[0] is field 3 (state); utime, stime, cutime, cstime are
	// fields 14 to 17.
	if len(fields) < 15 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	last := 12
	if children {
		last = 14
	}
	var ticks int64
	for _, f := range fields[11 : last+1] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// parentOf is the parent pid of pid, or 0.
func parentOf(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// postgresCPU is the CPU time of the whole cluster: the postmaster, its
// live backends and workers, and those that have exited.
func (r *run) postgresCPU() (time.Duration, error) {
	data, err := os.ReadFile(filepath.Join(r.cluster.DataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	postmaster, err := strconv.Atoi(strings.SplitN(string(data), "\n", 2)[0])
	if err != nil {
		return 0, fmt.Errorf("read postmaster.pid: %w", err)
	}
	total, err := procCPU(postmaster, true)
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || parentOf(pid) != postmaster {
			continue
		}
		// A backend that exits between the two reads is missed here and
		// counted by the postmaster only once it is waited for.
		if cpu, err := procCPU(pid, false); err == nil {
			total += cpu
		}
	}
	return total, nil
}

// cpuMeter reads the CPU time of the processes a step runs on, so that a
// step can say what one request cost each of them.
type cpuMeter struct {
	r     *run
	pids  map[string]int // process name to pid; "load generator" is this process
	start map[string]time.Duration
}

func (r *run) cpuMeter(pids map[string]int) *cpuMeter {
	m := &cpuMeter{r: r, pids: pids}
	m.start, _ = m.read()
	return m
}

func (m *cpuMeter) read() (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	pg, err := m.r.postgresCPU()
	if err != nil {
		return nil, err
	}
	out["postgres"] = pg
	for name, pid := range m.pids {
		cpu, err := procCPU(pid, false)
		if err != nil {
			return nil, err
		}
		out[name] = cpu
	}
	return out, nil
}

// perRequest is the CPU each process spent per request since the meter
// started, given how many requests that was.
func (m *cpuMeter) perRequest(source string, requests int64, elapsed time.Duration, extra map[string]time.Duration) CPUPerRequest {
	c := CPUPerRequest{Source: source, Requests: requests, Ms: map[string]float64{}}
	end, err := m.read()
	if err != nil || m.start == nil || requests == 0 {
		c.Note = "not measured"
		if err != nil {
			c.Note += ": " + err.Error()
		}
		return c
	}
	var total time.Duration
	add := func(name string, d time.Duration) {
		c.Ms[name] = ms(d) / float64(requests)
		total += d
	}
	for name, at := range end {
		add(name, at-m.start[name])
	}
	for name, d := range extra {
		add(name, d)
	}
	c.TotalMs = ms(total) / float64(requests)
	if elapsed > 0 {
		c.Cores = total.Seconds() / elapsed.Seconds()
	}
	return c
}
