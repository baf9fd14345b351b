package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Report is everything one run measured, printed as tables and written
// as JSON.
type Report struct {
	Command  string    `json:"command"`
	Started  time.Time `json:"started"`
	Seconds  float64   `json:"seconds"`
	Quick    bool      `json:"quick"`
	Machine  Machine   `json:"machine"`
	Figures  []Figure  `json:"figures"`
	Targets  []Target  `json:"targets"`
	Findings Findings  `json:"findings"`
}

// Machine is what the figures were measured on.
type Machine struct {
	CPUs             int     `json:"cpus"`
	MemoryGiB        float64 `json:"memory_gib"`
	Postgres         string  `json:"postgres"`
	LoadAverageStart string  `json:"load_average_start"`
	LoadAverageEnd   string  `json:"load_average_end"`
	APIPoolSize      int     `json:"api_pool_size"`
	Settings         string  `json:"settings"`
}

// Figure is one measured figure: a rate with its latencies, or a single
// value (a duration, a size).
type Figure struct {
	Step    string  `json:"step"`
	Name    string  `json:"name"`
	Clients int     `json:"clients,omitempty"`
	Value   float64 `json:"value"`
	Unit    string  `json:"unit"`
	P50Ms   float64 `json:"p50_ms,omitempty"`
	P99Ms   float64 `json:"p99_ms,omitempty"`
	Errors  int     `json:"errors"`
	// Ratio is Value over the figure named by RatioOf (the pgbench limit
	// for api throughput, the empty table for the scale step ...).
	Ratio   float64 `json:"ratio,omitempty"`
	RatioOf string  `json:"ratio_of,omitempty"`
	Note    string  `json:"note,omitempty"`
	// LoadAverage is the machine's one-minute load average when the
	// figure was taken: on a shared machine, how much else was running.
	LoadAverage string `json:"load_average"`
}

// Target is a goal a figure is held to. Met is nil when the figures it
// needs were not measured in this run.
type Target struct {
	Name string `json:"name"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Met  *bool  `json:"met"`
}

// Findings are the diagnostics behind the figures.
type Findings struct {
	// PerRide compares what one ride costs the database when pgbench
	// runs it and when the api does, and what a replay costs.
	PerRide []PerRide `json:"per_ride,omitempty"`
	// CPU is the CPU time one request costs each process that serves it,
	// for pgbench and for the api: the profile of the ratio between them.
	CPU []CPUPerRequest `json:"cpu_per_request,omitempty"`
	// WaitEvents is what the database sessions were doing, sampled
	// during the 32-client steps of pgbench and of the api.
	WaitEvents []WaitEvents `json:"wait_events,omitempty"`
	// TableStats shows how many updates were HOT (no index maintenance).
	TableStats []TableStat `json:"table_stats,omitempty"`
	// IndexStats shows which indexes the statements used.
	IndexStats []IndexStat `json:"index_stats,omitempty"`
	// Explain holds EXPLAIN (ANALYZE, BUFFERS) of the hot statements on
	// the large table.
	Explain []Explain `json:"explain,omitempty"`
	// Profile is the top of the api's CPU profile during the 32-client
	// step, or why there is none.
	Profile string `json:"profile,omitempty"`
}

// PerRide is the database's work per request (a new ride, or a replay)
// over one step, read from counters that move in real time: transaction
// ids handed out (one per transaction that wrote or locked a row) and the
// WAL position.
type PerRide struct {
	Source     string  `json:"source"`
	Requests   int64   `json:"requests"`
	WriteXacts float64 `json:"write_xacts_per_request"`
	WALBytes   float64 `json:"wal_bytes_per_request"`
}

// CPUPerRequest is the CPU time, in milliseconds, that one request cost
// each process over one step (Postgres counted whole: every backend and
// worker), and how many of the machine's cores they kept busy together.
type CPUPerRequest struct {
	Source   string             `json:"source"`
	Requests int64              `json:"requests"`
	Ms       map[string]float64 `json:"ms"`
	TotalMs  float64            `json:"total_ms"`
	Cores    float64            `json:"cores"`
	Note     string             `json:"note,omitempty"`
}

// WaitEvents is what one step's database sessions were doing.
type WaitEvents struct {
	Source string  `json:"source"`
	Counts []Count `json:"counts"`
}

// Count is a labelled count.
type Count struct {
	Label string  `json:"label"`
	N     int     `json:"n"`
	Share float64 `json:"share"`
}

// TableStat is a table's update counters.
type TableStat struct {
	Table      string `json:"table"`
	Updates    int64  `json:"updates"`
	HOTUpdates int64  `json:"hot_updates"`
	Size       string `json:"size"`
}

// IndexStat is an index's usage counters.
type IndexStat struct {
	Index      string `json:"index"`
	Scans      int64  `json:"scans"`
	TuplesRead int64  `json:"tuples_read"`
	Size       string `json:"size"`
}

// Explain is one statement's plan.
type Explain struct {
	Name      string `json:"name"`
	Statement string `json:"statement"`
	Plan      string `json:"plan"`
}

// Table is rows of cells printed with aligned columns. Cells that are
// numbers are right-aligned, everything else left-aligned.
type Table struct {
	Header []string
	Rows   [][]string
}

// String renders the table with a rule under the header.
func (t Table) String() string {
	widths := make([]int, len(t.Header))
	for _, row := range append([][]string{t.Header}, t.Rows...) {
		for i, cell := range row {
			if i < len(widths) {
				widths[i] = max(widths[i], utf8.RuneCountInString(cell))
			}
		}
	}
	var b strings.Builder
	line := func(cells []string) {
		var parts []string
		for i, w := range widths {
			cell := ""
			if i < len(cells) {
				cell = cells[i]
			}
			pad := strings.Repeat(" ", w-utf8.RuneCountInString(cell))
			if isNumber(cell) {
				parts = append(parts, pad+cell)
			} else {
				parts = append(parts, cell+pad)
			}
		}
		b.WriteString(strings.TrimRight(strings.Join(parts, "  "), " "))
		b.WriteByte('\n')
	}
	line(t.Header)
	rule := make([]string, len(widths))
	for i, w := range widths {
		rule[i] = strings.Repeat("-", w)
	}
	line(rule)
	for _, row := range t.Rows {
		line(row)
	}
	return b.String()
}

func isNumber(s string) bool {
	s = strings.TrimSuffix(strings.TrimPrefix(s, "x"), "%")
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// FiguresTable is the report's main table.
func (r *Report) FiguresTable() Table {
	t := Table{Header: []string{"step", "figure", "clients", "value", "unit", "p50 ms", "p99 ms", "errors", "ratio", "load", "note"}}
	for _, f := range r.Figures {
		clients, p50, p99, ratio := "", "", "", ""
		if f.Clients > 0 {
			clients = strconv.Itoa(f.Clients)
		}
		if f.P50Ms > 0 || f.P99Ms > 0 {
			p50, p99 = formatFloat(f.P50Ms), formatFloat(f.P99Ms)
		}
		if f.RatioOf != "" {
			ratio = fmt.Sprintf("%.2f", f.Ratio)
		}
		t.Rows = append(t.Rows, []string{f.Step, f.Name, clients, formatFloat(f.Value), f.Unit,
			p50, p99, strconv.Itoa(f.Errors), ratio, f.LoadAverage, f.Note})
	}
	return t
}

// TargetsTable lists the targets and whether each is met.
func (r *Report) TargetsTable() Table {
	t := Table{Header: []string{"target", "want", "got", "met"}}
	for _, tg := range r.Targets {
		met := "not measured"
		if tg.Met != nil {
			met = map[bool]string{true: "yes", false: "NO"}[*tg.Met]
		}
		t.Rows = append(t.Rows, []string{tg.Name, tg.Want, tg.Got, met})
	}
	return t
}

// formatFloat prints a figure with as many decimals as its size warrants.
func formatFloat(v float64) string {
	switch a := max(v, -v); {
	case a == 0:
		return "0"
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// WriteText prints the tables and the findings.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "Rocket Rides bench (%s), %d CPUs, %.0f GiB, %s; api pool %d; load average at start %s\n\n",
		map[bool]string{true: "quick", false: "full"}[r.Quick], r.Machine.CPUs, r.Machine.MemoryGiB,
		r.Machine.Postgres, r.Machine.APIPoolSize, r.Machine.LoadAverageStart)
	fmt.Fprint(w, r.FiguresTable().String())
	fmt.Fprintln(w, "(load: the machine's 1-minute load average when the figure was taken; the bench alone keeps it near 2-3)")
	fmt.Fprintln(w)
	fmt.Fprint(w, r.TargetsTable().String())

	f := r.Findings
	if len(f.PerRide) > 0 {
		fmt.Fprintln(w, "\nDatabase work per request:")
		t := Table{Header: []string{"source", "requests", "write xacts", "WAL bytes"}}
		for _, p := range f.PerRide {
			t.Rows = append(t.Rows, []string{p.Source, strconv.FormatInt(p.Requests, 10),
				formatFloat(p.WriteXacts), formatFloat(p.WALBytes)})
		}
		fmt.Fprint(w, t.String())
	}
	if len(f.CPU) > 0 {
		fmt.Fprintln(w, "\nCPU per request, ms (all processes on the same cores):")
		cols := []string{"postgres", "pgbench", "api", "stripe fake", "load generator"}
		t := Table{Header: append(append([]string{"source", "requests"}, cols...), "total", "cores busy")}
		for _, c := range f.CPU {
			row := []string{c.Source, strconv.FormatInt(c.Requests, 10)}
			for _, col := range cols {
				cell := ""
				if v, ok := c.Ms[col]; ok {
					cell = fmt.Sprintf("%.2f", v)
				}
				row = append(row, cell)
			}
			row = append(row, fmt.Sprintf("%.2f", c.TotalMs), fmt.Sprintf("%.2f", c.Cores))
			if c.Note != "" {
				row = append(row[:2], c.Note)
			}
			t.Rows = append(t.Rows, row)
		}
		fmt.Fprint(w, t.String())
	}
	for _, we := range f.WaitEvents {
		fmt.Fprintf(w, "\nWhat the database sessions were doing, %s (sampled):\n", we.Source)
		t := Table{Header: []string{"state / wait event", "samples", "share"}}
		for _, c := range we.Counts {
			t.Rows = append(t.Rows, []string{c.Label, strconv.Itoa(c.N), fmt.Sprintf("%.0f%%", 100*c.Share)})
		}
		fmt.Fprint(w, t.String())
	}
	if len(f.TableStats) > 0 {
		fmt.Fprintln(w, "\nUpdates since the api's database was created:")
		t := Table{Header: []string{"table", "updates", "HOT", "size"}}
		for _, s := range f.TableStats {
			t.Rows = append(t.Rows, []string{s.Table, strconv.FormatInt(s.Updates, 10), strconv.FormatInt(s.HOTUpdates, 10), s.Size})
		}
		fmt.Fprint(w, t.String())
	}
	if len(f.IndexStats) > 0 {
		fmt.Fprintln(w, "\nIndex scans since the api's database was created:")
		t := Table{Header: []string{"index", "scans", "entries read", "size"}}
		for _, s := range f.IndexStats {
			t.Rows = append(t.Rows, []string{s.Index, strconv.FormatInt(s.Scans, 10), strconv.FormatInt(s.TuplesRead, 10), s.Size})
		}
		fmt.Fprint(w, t.String())
	}
	if f.Profile != "" {
		fmt.Fprintf(w, "\napi CPU profile (32 clients):\n%s\n", strings.TrimRight(f.Profile, "\n"))
	}
	for _, e := range f.Explain {
		fmt.Fprintf(w, "\nEXPLAIN (ANALYZE, BUFFERS) %s:\n%s\n", e.Name, strings.TrimRight(e.Plan, "\n"))
	}
}

// WriteJSON writes the report to path.
func (r *Report) WriteJSON(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}
