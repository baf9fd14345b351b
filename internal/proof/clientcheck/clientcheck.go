// Package clientcheck is the conformance harness for clients of the API:
// it serves the contract's hard cases for POST /rides, one base URL per
// case, and reports, case by case, whether the client that was pointed at
// it retried as docs/openapi.yaml says. It knows nothing of the client
// it checks, which may be written in any language: it sees only the
// tries that reach it, and measures what the client did.
//
// Each case is a scripted server at /<case>: POST /<case>/rides answers
// the case's answers in turn, one per try. GET /report is the report so
// far, POST /reset forgets every try. A client creates one ride per case,
// and once it has returned (whatever it returned), the report says
// whether it kept the key and the body, waited Retry-After, backed off,
// stopped on a final answer and gave up within its budget.
//
// Three cases are the app's death: Run, which runs a client command for
// every case, kills the command (SIGKILL to its process group) once its
// first try has arrived, after the charge with the answer lost, or in its
// backoff wait, and starts it again with the same journal; the restarted
// command must resume the ride with its key and bytes, and make no other.
// ProjectClients lists the project's own clients, which pass them all.
//
// The checks are lower bounds: a loaded machine makes a client slower,
// never faster, so a client that passes on a quiet one passes there too.
// docs/clients.md gives the rules and every case's answers.
package clientcheck

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rocketrides/rocketrides/internal/platform/problem"
	"github.com/rocketrides/rocketrides/internal/rides"
)

// DefaultBudget is the most tries a client may spend on one request.
const DefaultBudget = 10

// MinBackoff is the least the waits before three retries that had no
// Retry-After may add up to. A client drawing full jitter from the
// contract's ceilings (0.5 s, 1 s, 2 s) waits less with a chance of about
// 5 in a million; one that does not back off waits about nothing.
const MinBackoff = 30 * time.Millisecond

// Config configures a Harness.
type Config struct {
	// Budget is the most tries a client may spend on one request; zero
	// means DefaultBudget.
	Budget int
}

// Harness serves the cases and records every try. It is an
// http.Handler.
type Harness struct {
	budget int
	// kills asks the runner of a death case to kill the client, after
	// the wait it carries (Run).
	kills map[string]chan time.Duration
	mu    sync.Mutex
	tries map[string][]*try // by case name
	// stored are the answers of requests that ran to their end, by case
	// and key: a retry gets them replayed, as the API's would.
	stored map[string]map[string]answer
	// restarts counts the client's restarts, by case.
	restarts map[string]int
	// killing: the runner was asked to kill the case's client, and has
	// not restarted it yet.
	killing map[string]bool
}

// New returns a Harness for config (nil: the defaults).
func New(config *Config) (*Harness, error) {
	var cfg Config
	if config != nil {
		cfg = *config
	}
	if cfg.Budget < 0 {
		return nil, fmt.Errorf("clientcheck: Config.Budget must not be negative, got %d", cfg.Budget)
	}
	if cfg.Budget == 0 {
		cfg.Budget = DefaultBudget
	}
	h := &Harness{budget: cfg.Budget, kills: map[string]chan time.Duration{}}
	for _, c := range cases {
		if c.Dies() {
			h.kills[c.Name] = make(chan time.Duration, 1)
		}
	}
	h.Reset()
	return h, nil
}

// try is one request that reached a case, and what it was answered.
type try struct {
	key, contentType string
	body             []byte
	arrived          time.Time // when its header had arrived
	answered         time.Time // just before its answer was written
	answer           answer
	// run counts the client's runs in a death case: 0 before its
	// restart, 1 after it.
	run int
}

// Names lists the cases, in the order the report gives them.
func Names() []string {
	names := make([]string, len(cases))
	for i, c := range cases {
		names[i] = c.Name
	}
	return names
}

// Cases lists the cases, in the order the report gives them.
func Cases() []Case {
	return slices.Clone(cases)
}

// ServeHTTP serves POST /<case>/rides, GET /report and POST /reset, and
// at / the list of cases.
func (h *Harness) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/report" && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, h.Report().String())
		return
	case r.URL.Path == "/reset" && r.Method == http.MethodPost:
		h.Reset()
		w.WriteHeader(http.StatusNoContent)
		return
	case r.URL.Path == "/" && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for _, c := range cases {
			fmt.Fprintf(w, "%-20s http://%s/%s  %s\n", c.Name, r.Host, c.Name, c.Title)
		}
		return
	}
	name, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	c := caseNamed(name)
	if c == nil || rest != "rides" || r.Method != http.MethodPost {
		writeProblem(w, answer{status: http.StatusNotFound, code: "not_found"})
		return
	}
	t := &try{key: r.Header.Get("Idempotency-Key"), contentType: r.Header.Get("Content-Type"), arrived: time.Now()}
	t.body, _ = io.ReadAll(io.LimitReader(r.Body, 64<<10))
	// Recorded whole, answer included, under one lock: a report taken
	// meanwhile (GET /report) sees every try as it was answered.
	h.mu.Lock()
	t.answer = c.answer(len(h.tries[c.Name]))
	if stored, ok := h.stored[c.Name][t.key]; ok {
		t.answer = stored
	}
	// A try that beats the kill (a machine slow to deliver it) dies
	// with its client too, unanswered.
	dying := h.killing[c.Name]
	if dying {
		t.answer = answer{kill: killUnanswered}
	}
	if t.answer.charged {
		h.stored[c.Name][t.key] = createdReplayed
	}
	if t.answer.kill != noKill {
		h.killing[c.Name] = true
	}
	t.answered, t.run = time.Now(), h.restarts[c.Name]
	h.tries[c.Name] = append(h.tries[c.Name], t)
	h.mu.Unlock()
	switch {
	case t.answer.kill == killUnanswered:
		// The answer is lost with the client: held until it dies.
		if !dying {
			h.kill(c.Name, 0)
		}
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
	case t.answer.cut:
		cut(w)
	case t.answer.status == http.StatusCreated:
		writeRide(w, t.answer)
	default:
		writeProblem(w, t.answer)
		if t.answer.kill == killInWait {
			// Killed once the client has the answer, in its wait.
			_ = http.NewResponseController(w).Flush()
			h.kill(c.Name, t.answer.retryAfter/2)
		}
	}
}

// kill asks the runner of the case named name to kill its client after
// wait; without a runner (the harness only serving), nobody does.
func (h *Harness) kill(name string, wait time.Duration) {
	select {
	case h.kills[name] <- wait:
	default:
	}
}

// Reset forgets every try, for another client.
func (h *Harness) Reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tries = map[string][]*try{}
	h.stored, h.restarts, h.killing = map[string]map[string]answer{}, map[string]int{}, map[string]bool{}
	for name, kill := range h.kills {
		h.stored[name] = map[string]answer{}
		select {
		case <-kill:
		default:
		}
	}
}

// restarted records that the client of the case named name was killed
// and is starting again: the tries that follow are its restart's.
func (h *Harness) restarted(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.restarts[name]++
	h.killing[name] = false
}

// cut closes the connection without an answer, as a server that died
// after it had done the work.
func cut(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // closes the connection too
	}
	_ = conn.Close()
}

// rideID is the ride every case's request creates.
const rideID = 42

func writeRide(w http.ResponseWriter, a answer) {
	w.Header().Set("Content-Type", "application/json")
	if a.replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":%d,"created_at":"2024-05-01T12:00:00.123456Z","status":"succeeded",`+
		`"origin_lat":37.7749,"origin_lon":-122.4194,"target_lat":37.8044,"target_lon":-122.2712,`+
		`"amount":2000,"currency":"usd","stripe_charge_id":"ch_clientcheck"}`, rideID)
}

// writeProblem writes a as the api writes a problem, but with the
// script's Rocket-Rides-Should-Retry and Idempotent-Replayed, which a
// case may set where problem.Problem.Write would derive them otherwise.
func writeProblem(w http.ResponseWriter, a answer) {
	h := w.Header()
	for name, v := range a.header {
		h[name] = v
	}
	if a.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int(a.retryAfter/time.Second)))
	}
	h.Set("Rocket-Rides-Should-Retry", strconv.FormatBool(!a.final))
	if a.replayed {
		h.Set("Idempotent-Replayed", "true")
	}
	h.Set("Content-Type", "application/problem+json")
	w.WriteHeader(a.status)
	ride := ""
	if a.rideID {
		ride = fmt.Sprintf(`,"ride_id":%d`, rideID)
	}
	fmt.Fprintf(w, `{"type":%q,"title":%q,"status":%d,"code":%q%s}`,
		problem.Type(a.code), problem.Title(a.status), a.status, a.code, ride)
}

// Verdict is a check's outcome.
type Verdict string

// Verdicts.
const (
	Pass Verdict = "pass"
	Fail Verdict = "FAIL"
	// NA: the case gave the client no occasion to show it.
	NA Verdict = "n/a"
)

// Check is one rule, checked on one case.
type Check struct {
	Rule    string
	Verdict Verdict
	// Why says what the client did, when it failed.
	Why string
}

// Result is one case's outcome.
type Result struct {
	Case  Case
	Tries int
	// Run is false when no try reached the case.
	Run    bool
	Checks []Check
}

// Passed reports whether the case ran and no check failed.
func (r Result) Passed() bool {
	if !r.Run {
		return false
	}
	for _, c := range r.Checks {
		if c.Verdict == Fail {
			return false
		}
	}
	return true
}

// Failed lists the rules the case broke.
func (r Result) Failed() []string {
	var rules []string
	for _, c := range r.Checks {
		if c.Verdict == Fail {
			rules = append(rules, c.Rule)
		}
	}
	return rules
}

// Report is every case's outcome.
type Report struct {
	Results []Result
}

// Result is the outcome of the case named name.
func (r Report) Result(name string) Result {
	for _, res := range r.Results {
		if res.Case.Name == name {
			return res
		}
	}
	return Result{}
}

// Passed reports whether every case ran and passed.
func (r Report) Passed() bool {
	for _, res := range r.Results {
		if !res.Passed() {
			return false
		}
	}
	return true
}

func (r Report) String() string {
	var b strings.Builder
	for _, res := range r.Results {
		verdict := "pass"
		switch {
		case !res.Run:
			verdict = "not run"
		case !res.Passed():
			verdict = "FAIL"
		}
		fmt.Fprintf(&b, "%-20s %-8s %d tries  %s\n", res.Case.Name, verdict, res.Tries, res.Case.Title)
		if !res.Run {
			continue
		}
		for _, c := range res.Checks {
			fmt.Fprintf(&b, "    %-4s %s", c.Verdict, c.Rule)
			if c.Why != "" {
				fmt.Fprintf(&b, ": %s", c.Why)
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// The rules every case is checked against.
const (
	RuleSameRequest = "same key and body on every try"
	RuleRetryAfter  = "waited at least Retry-After"
	RuleBackoff     = "backed off"
	RuleStopped     = "stopped on a final answer"
	RuleRetried     = "retried what may still complete"
	RuleBudget      = "gave up within its budget"
	// The death cases' own.
	RuleResumed = "resumed the killed ride after its restart"
	RuleOnce    = "one ride for one tap"
)

// Report checks every case on the tries so far. Ask for it once the
// client has returned: a client that is still waiting to retry has not
// yet shown what it does.
func (h *Harness) Report() Report {
	h.mu.Lock()
	defer h.mu.Unlock()
	var rep Report
	for _, c := range cases {
		rep.Results = append(rep.Results, check(c, h.tries[c.Name], h.budget))
	}
	return rep
}

// check judges the tries a case got.
func check(c Case, tries []*try, budget int) Result {
	res := Result{Case: c, Tries: len(tries), Run: len(tries) > 0}
	if !res.Run {
		return res
	}
	add := func(rule string, v Verdict, why string, args ...any) {
		if why != "" {
			why = fmt.Sprintf(why, args...)
		}
		res.Checks = append(res.Checks, Check{Rule: rule, Verdict: v, Why: why})
	}

	// The same key and body: the first try's key must be one, and every
	// try must send it and the first try's bytes again.
	first := tries[0]
	switch {
	case !validKey(first.key):
		add(RuleSameRequest, Fail, "try 1 sent Idempotency-Key %q, not 20 to 255 printable ASCII characters", clip(first.key))
	case !validBody(first.contentType, first.body):
		add(RuleSameRequest, Fail, "try 1 sent no ride's parameters (Content-Type %q, body %q)", clip(first.contentType), clip(string(first.body)))
	default:
		why := ""
		for i, t := range tries[1:] {
			switch {
			case t.key != first.key:
				why = fmt.Sprintf("try %d sent key %q, try 1 %q", i+2, clip(t.key), clip(first.key))
			case !bytes.Equal(t.body, first.body) || t.contentType != first.contentType:
				why = fmt.Sprintf("try %d sent body %q (%s), try 1 %q (%s)", i+2, clip(string(t.body)), clip(t.contentType), clip(string(first.body)), clip(first.contentType))
			}
			if why != "" {
				break
			}
		}
		if why != "" {
			add(RuleSameRequest, Fail, "%s", why)
		} else {
			add(RuleSameRequest, Pass, "")
		}
	}

	// Retry-After, and the backoff after answers without it.
	var (
		raWhy, raSeen string
		noHint        []time.Duration
	)
	for i, t := range tries[:len(tries)-1] {
		if tries[i+1].run != t.run {
			// A restarted client has not seen the answer its
			// predecessor died with.
			continue
		}
		gap := tries[i+1].arrived.Sub(t.answered)
		if ra := t.answer.retryAfter; ra > 0 {
			raSeen = "yes"
			if gap < ra && raWhy == "" {
				raWhy = fmt.Sprintf("try %d came %s after an answer with Retry-After: %d", i+2, gap.Round(time.Millisecond), int(ra/time.Second))
			}
		} else if !t.answer.final {
			noHint = append(noHint, gap)
		}
	}
	switch {
	case raWhy != "":
		add(RuleRetryAfter, Fail, "%s", raWhy)
	case raSeen == "":
		add(RuleRetryAfter, NA, "")
	default:
		add(RuleRetryAfter, Pass, "")
	}
	if len(noHint) >= 3 {
		var sum time.Duration
		for _, g := range noHint {
			sum += g
		}
		if sum < MinBackoff {
			add(RuleBackoff, Fail, "%d retries without Retry-After came %s apart in all; full jitter from 0.5 s waits %s or more but for about 5 in a million", len(noHint), sum.Round(time.Microsecond), MinBackoff)
		} else {
			add(RuleBackoff, Pass, "")
		}
	} else {
		add(RuleBackoff, NA, "")
	}

	// Stopped: no try after a final answer.
	stopped := true
	for i, t := range tries[:len(tries)-1] {
		if t.answer.final {
			add(RuleStopped, Fail, "try %d followed the final answer to try %d, %s", i+2, i+1, t.answer)
			stopped = false
			break
		}
	}
	if stopped {
		add(RuleStopped, Pass, "")
	}

	// Retried: a case that ends in a final answer must be driven to it;
	// one that never does must be retried at least once.
	last := tries[len(tries)-1].answer
	switch {
	case last.final:
		add(RuleRetried, Pass, "")
	case len(tries) >= budget:
		add(RuleRetried, Pass, "")
	case c.endless && len(tries) >= 2:
		add(RuleRetried, Pass, "")
	default:
		add(RuleRetried, Fail, "the client stopped after try %d, answered %s, which a retry may change", len(tries), last)
	}

	if len(tries) > budget {
		add(RuleBudget, Fail, "%d tries, more than the budget of %d", len(tries), budget)
	} else {
		add(RuleBudget, Pass, "")
	}

	if c.Dies() {
		checkDeath(tries, add)
	}
	return res
}

// checkDeath judges what a client killed and started again did: it must
// resume the ride it died in, and make no other.
func checkDeath(tries []*try, add func(rule string, v Verdict, why string, args ...any)) {
	first := tries[0]
	i := slices.IndexFunc(tries, func(t *try) bool { return t.run > 0 })
	switch {
	case i < 0:
		add(RuleResumed, Fail, "the restarted client sent nothing: the killed ride was left pending")
	case tries[i].key != first.key:
		add(RuleResumed, Fail, "the restarted client sent key %q, not the killed ride's %q: a new ride", clip(tries[i].key), clip(first.key))
	case !bytes.Equal(tries[i].body, first.body):
		add(RuleResumed, Fail, "the restarted client sent body %q, the killed ride %q", clip(string(tries[i].body)), clip(string(first.body)))
	default:
		add(RuleResumed, Pass, "")
	}

	var rides []string
	for _, t := range tries {
		if t.answer.madeRide() && !slices.Contains(rides, t.key) {
			rides = append(rides, t.key)
		}
	}
	if len(rides) > 1 {
		add(RuleOnce, Fail, "%d rides, under keys %s", len(rides), strings.Join(rides, ", "))
	} else {
		add(RuleOnce, Pass, "")
	}
}

// validKey is the contract's rule for an Idempotency-Key, its unquoted
// form: printable ASCII, as long as the api accepts.
func validKey(k string) bool {
	if len(k) < rides.MinKeyLength || len(k) > rides.MaxKeyLength {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// validBody reports whether body names the four parameters of a ride, as
// a form or as JSON.
func validBody(contentType string, body []byte) bool {
	params := []string{"origin_lat", "origin_lon", "target_lat", "target_lon"}
	mediaType, _, _ := strings.Cut(contentType, ";")
	switch strings.TrimSpace(strings.ToLower(mediaType)) {
	case "application/x-www-form-urlencoded":
		v, err := url.ParseQuery(string(body))
		if err != nil {
			return false
		}
		for _, p := range params {
			if _, err := strconv.ParseFloat(v.Get(p), 64); err != nil {
				return false
			}
		}
		return true
	case "application/json":
		for _, p := range params {
			if !bytes.Contains(body, []byte(`"`+p+`"`)) {
				return false
			}
		}
		return true
	}
	return false
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// ErrUnknownCase is returned for a case name the harness does not have.
var ErrUnknownCase = errors.New("clientcheck: no such case")

// URL is the base URL of the case named name on a harness served at
// base, such as http://127.0.0.1:8089.
func URL(base, name string) (string, error) {
	if caseNamed(name) == nil {
		return "", fmt.Errorf("%w: %q (the cases are %s)", ErrUnknownCase, name, strings.Join(Names(), ", "))
	}
	return strings.TrimSuffix(base, "/") + "/" + name, nil
}
