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
	Command string    `json:"command"`
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"`
	Quick   bool      `json:"quick"`
	// RateLimits says whether the api counted its rate limits: "off", or
	// "on, not reached" (Config.RateLimits).
	RateLimits string   `json:"rate_limits"`
	Machine    Machine  `json:"machine"`
	Figures    []Figure `json:"figures"`
	Targets    []Target `json:"targets"`
	// Paths are a new ride on each of the key store's paths, side by
	// side: the fast path (IDEMPOTENCY_PIPELINE=on, the default) and the
	// plain one (off). Each side is filled in by the step that measures
	// it, new and plain.
	Paths struct {
		Fast  PathFigures `json:"fast"`
		Plain PathFigures `json:"plain"`
	} `json:"paths"`
	// Statements is what each statement of a new ride, a replay and the
	// minimal design cost Postgres (cost.go).
	Statements []StatementCost `json:"statements"`
	// Explain is the plan of each statement of a captured ride and replay
	// on the table with millions of keys.
	Explain string `json:"explain"`
}

// Machine is what the figures were measured on.
type Machine struct {
	CPUs             int     `json:"cpus"`
	MemoryGiB        float64 `json:"memory_gib"`
	Postgres         string  `json:"postgres"`
	Settings         string  `json:"settings"`
	APIPoolSize      int     `json:"api_pool_size"`
	LoadAverageStart string  `json:"load_average_start"`
	LoadAverageEnd   string  `json:"load_average_end"`
}

// Figure is a rate with its latencies, or a single value. Ratio is Value
// over the figure named by RatioOf. LoadAverage is the machine's load
// when it was taken: on a shared machine, how much else was running.
type Figure struct {
	Step        string  `json:"step"`
	Name        string  `json:"name"`
	Clients     int     `json:"clients,omitempty"`
	Value       float64 `json:"value"`
	Unit        string  `json:"unit"`
	P50Ms       float64 `json:"p50_ms,omitempty"`
	P99Ms       float64 `json:"p99_ms,omitempty"`
	Errors      int     `json:"errors"`
	Ratio       float64 `json:"ratio,omitempty"`
	RatioOf     string  `json:"ratio_of,omitempty"`
	Note        string  `json:"note,omitempty"`
	LoadAverage string  `json:"load_average"`
}

// PathFigures are what a new ride costs on one of the key store's paths:
// its round trips and statements (captured, the token's look-up included),
// and, at 32 clients, new rides a second and the CPU the api and Postgres
// spent on each. Zero is not measured.
type PathFigures struct {
	RoundTrips    int     `json:"round_trips"`
	Statements    int     `json:"statements"`
	Rate          float64 `json:"rides_per_second"`
	APICPUMs      float64 `json:"api_cpu_ms"`
	PostgresCPUMs float64 `json:"postgres_cpu_ms"`
}

// PathsTable sets the two paths side by side.
func (r *Report) PathsTable() Table {
	t := Table{Header: []string{"a new ride", "fast (IDEMPOTENCY_PIPELINE=on)", "plain (off)", "plain / fast"}}
	fast, plain := r.Paths.Fast, r.Paths.Plain
	row := func(name string, f, p float64) {
		cell := func(v float64) string {
			switch {
			case v == 0:
				return "not measured"
			case v == float64(int(v)):
				return strconv.Itoa(int(v))
			}
			return formatFloat(v)
		}
		ratio := ""
		if f > 0 && p > 0 {
			ratio = fmt.Sprintf("%.2f", p/f)
		}
		t.Rows = append(t.Rows, []string{name, cell(f), cell(p), ratio})
	}
	row("round trips", float64(fast.RoundTrips), float64(plain.RoundTrips))
	row("statements", float64(fast.Statements), float64(plain.Statements))
	row("new rides/s, 32 clients", fast.Rate, plain.Rate)
	row("api CPU ms per ride", fast.APICPUMs, plain.APICPUMs)
	row("Postgres CPU ms per ride", fast.PostgresCPUMs, plain.PostgresCPUMs)
	return t
}

// Target is a goal a figure is held to. Met is nil when the figures it
// needs were not measured in this run.
type Target struct {
	Name string `json:"name"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Met  *bool  `json:"met"`
}

// Table is rows of cells printed with aligned columns: numbers to the
// right, everything else to the left.
type Table struct {
	Header []string
	Rows   [][]string
}

// String renders the table with a rule under the header.
func (t Table) String() string {
	rows := append([][]string{t.Header, nil}, t.Rows...)
	widths := make([]int, len(t.Header))
	for _, row := range rows {
		for i, cell := range row[:min(len(row), len(widths))] {
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	for _, w := range widths {
		rows[1] = append(rows[1], strings.Repeat("-", w))
	}
	var b strings.Builder
	for _, row := range rows {
		parts := make([]string, len(widths))
		for i, w := range widths {
			if i < len(row) {
				parts[i] = row[i]
			}
			pad := strings.Repeat(" ", w-utf8.RuneCountInString(parts[i]))
			if _, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimPrefix(parts[i], "x"), "%"), 64); err == nil {
				parts[i] = pad + parts[i]
			} else {
				parts[i] += pad
			}
		}
		b.WriteString(strings.TrimRight(strings.Join(parts, "  "), " ") + "\n")
	}
	return b.String()
}

// FiguresTable is the report's main table.
func (r *Report) FiguresTable() Table {
	t := Table{Header: []string{"step", "figure", "clients", "value", "unit", "p50 ms", "p99 ms", "errors", "ratio", "load", "note"}}
	for _, f := range r.Figures {
		row := []string{f.Step, f.Name, "", formatFloat(f.Value), f.Unit, "", "", strconv.Itoa(f.Errors), "", f.LoadAverage, f.Note}
		if f.Clients > 0 {
			row[2] = strconv.Itoa(f.Clients)
		}
		if f.P50Ms > 0 || f.P99Ms > 0 {
			row[5], row[6] = formatFloat(f.P50Ms), formatFloat(f.P99Ms)
		}
		if f.RatioOf != "" {
			row[8] = fmt.Sprintf("%.2f", f.Ratio)
		}
		t.Rows = append(t.Rows, row)
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
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// WriteText prints the tables and the findings.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "Rocket Rides bench (%s), %d CPUs, %.0f GiB, %s; api pool %d; rate limits %s; load average at start %s\n\n%s",
		map[bool]string{true: "quick", false: "full"}[r.Quick], r.Machine.CPUs, r.Machine.MemoryGiB,
		r.Machine.Postgres, r.Machine.APIPoolSize, r.RateLimits, r.Machine.LoadAverageStart, r.FiguresTable())
	fmt.Fprintf(w, "(load: the machine's 1-minute load average when the figure was taken; the bench alone keeps it near 2-3)\n\n%s",
		r.TargetsTable())
	if r.Paths.Fast != (PathFigures{}) || r.Paths.Plain != (PathFigures{}) {
		fmt.Fprintf(w, "\nThe key store's two paths, side by side (steps new and plain):\n%s", r.PathsTable())
	}
	if len(r.Statements) > 0 {
		fmt.Fprintf(w, "\nWhat each statement cost Postgres (pg_stat_statements, %d clients; per call but calls/ride):\n%s",
			accountClients, r.StatementsTable())
	}
	if r.Explain != "" {
		fmt.Fprintf(w, "\nEXPLAIN ANALYZE of a captured ride and replay on the large table (auto_explain):\n%s\n", strings.TrimSpace(r.Explain))
	}
}

// WriteJSON writes the report to path.
func (r *Report) WriteJSON(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err == nil {
		err = os.WriteFile(path, append(data, '\n'), 0o644)
	}
	return err
}
