package console

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/platform/loop"
	"github.com/rocketrides/rocketrides/internal/rides"
)

// The lab sends a ride through the api with a failure chosen by a person,
// and shows on the request's story page what the design did about it. It
// exists only where simulated errors are enabled (SIMULATED_ERRORS=true,
// as in make dev): it asks the api for raise_error and sets faults on the
// Stripe fake through the fake's own HTTP endpoint, POST /_fake/faults at
// STRIPE_API_BASE, which only the fake has (real Stripe answers 404).

// Lab configures the lab. A nil Config.Lab leaves it out.
type Lab struct {
	// APIURL is the api the lab's client sends rides to. Required.
	APIURL string
	// Token is the demo user's API token the rides are sent with.
	// Required. It is never shown.
	Token string
	// StripeBase is the Stripe fake's base URL (STRIPE_API_BASE).
	// Required.
	StripeBase string
	// StripeKey authenticates to the fake (STRIPE_API_KEY). Required.
	StripeKey string
	// Timeout bounds one attempt of the lab's client, as a mobile app
	// bounds a request. Default DefaultLabTimeout.
	Timeout time.Duration
}

// The lab client's default timeout, and its limits.
const (
	DefaultLabTimeout = 2 * time.Second
	// labBackoff is the client's first wait between attempts, doubled
	// after each.
	labBackoff = 250 * time.Millisecond
	// labAttempts is how often the lab's client tries before it leaves
	// the request to the completer, as an app that was closed does.
	labAttempts = 8
	// maxLabCalls is the most charge calls Stripe can be down for (N).
	maxLabCalls = 5
)

func (l *Lab) validate() error {
	switch {
	case l.APIURL == "":
		return errors.New("console: Lab.APIURL is required")
	case l.Token == "":
		return errors.New("console: Lab.Token is required")
	case l.StripeBase == "":
		return errors.New("console: Lab.StripeBase is required")
	case l.StripeKey == "":
		return errors.New("console: Lab.StripeKey is required")
	case l.Timeout < 0:
		return fmt.Errorf("console: Lab.Timeout must not be negative, got %s", l.Timeout)
	}
	return nil
}

// scenario is a failure the lab can inflict.
type scenario struct {
	Name, Title, About string
}

// scenarios are the lab's failures, in the order the page lists them.
var scenarios = []scenario{
	{"dies_after_ride", "The request dies after the ride is created",
		"The api fails the request on purpose (raise_error) after the ride's atomic phase and before the charge. The client gives up, as an app that was closed; the completer finishes the request."},
	{"stripe_down", "Stripe is down for N calls",
		"The fake answers the next N charge calls with a 500 before charging. The client retries with the same key and backoff."},
	{"answer_lost", "Stripe charges, then the answer is lost",
		"The fake makes the charge and drops the connection without answering. The charge is repeated with the same Stripe idempotency key."},
	{"slow_stripe", "Stripe is slower than the client's timeout",
		"The fake waits longer than the client's timeout before charging. The client gives up on its first attempt and retries with the same key."},
	{"race", "Two clients race one key",
		"Two clients send the same request with the same key at the same moment, while Stripe is slow."},
}

func scenarioNamed(name string) (scenario, bool) {
	for _, s := range scenarios {
		if s.Name == name {
			return s, true
		}
	}
	return scenario{}, false
}

// labRun is one ride the lab sent: what its clients saw, for the story.
type labRun struct {
	mu       sync.Mutex
	Scenario scenario
	Key      string
	Events   []labEvent
	Done     bool
}

// labEvent is one thing the lab's client saw or did, with the part of the
// design that saved the customer.
type labEvent struct {
	At      time.Time
	Client  string
	What    string
	Why     Why
	Outcome string
}

func (run *labRun) add(client, what, outcome string, w Why) {
	run.mu.Lock()
	defer run.mu.Unlock()
	run.Events = append(run.Events, labEvent{At: time.Now(), Client: client, What: what, Outcome: outcome, Why: w})
}

// view is a copy of the run to render.
func (run *labRun) view() *labRun {
	run.mu.Lock()
	defer run.mu.Unlock()
	return &labRun{Scenario: run.Scenario, Key: run.Key, Events: append([]labEvent(nil), run.Events...), Done: run.Done}
}

// labRuns remembers the lab's recent runs by their client key.
type labRuns struct {
	mu   sync.Mutex
	runs map[string]*labRun
	keys []string
}

// labRunsKept is how many runs the console remembers.
const labRunsKept = 50

func (l *labRuns) put(run *labRun) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runs == nil {
		l.runs = map[string]*labRun{}
	}
	l.runs[run.Key] = run
	l.keys = append(l.keys, run.Key)
	if len(l.keys) > labRunsKept {
		delete(l.runs, l.keys[0])
		l.keys = l.keys[1:]
	}
}

func (l *labRuns) get(key string) *labRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.runs[key]
}

func (c *Console) labPage(w http.ResponseWriter, r *http.Request, s *session) {
	c.renderLab(w, r, s, http.StatusOK, "")
}

// renderLab renders the lab's form with status and, when the last one
// was refused, msg saying why.
func (c *Console) renderLab(w http.ResponseWriter, r *http.Request, s *session, status int, msg string) {
	c.renderStatus(w, r, status, "lab", s, map[string]any{
		"Scenarios": scenarios, "Error": msg,
		"Timeout": c.lab.Timeout, "APIURL": c.lab.APIURL, "MaxCalls": maxLabCalls,
	})
}

// labStart starts a scenario's ride and sends the browser to its story
// as soon as the api has claimed its key.
func (c *Console) labStart(w http.ResponseWriter, r *http.Request, s *session) {
	name := r.PostFormValue("scenario")
	sc, ok := scenarioNamed(name)
	if !ok {
		c.renderLab(w, r, s, http.StatusBadRequest, fmt.Sprintf("Refused: there is no scenario %q; pick one below.", name))
		return
	}
	calls := 2
	if v := r.PostFormValue("calls"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLabCalls {
			c.renderLab(w, r, s, http.StatusBadRequest, fmt.Sprintf("Refused: N (calls) must be a whole number from 1 to %d, not %q.", maxLabCalls, v))
			return
		}
		calls = n
	}
	// One run at a time: the faults are the fake's, not the run's, so a
	// second run would meet the first's faults and clear them under it.
	if !c.labRunning.CompareAndSwap(false, true) {
		c.renderLab(w, r, s, http.StatusConflict, "Refused: a lab run is in progress; send this one once its story says the lab's clients are done.")
		return
	}
	run := &labRun{Scenario: sc, Key: "lab-" + uuid.NewString()}
	c.labRuns.put(run)
	c.logger.InfoContext(r.Context(), "Console lab run",
		slog.String("scenario", sc.Name), slog.String("idempotency_key", run.Key), slog.String("operator", s.Operator))
	// The run outlives this request: the story page watches it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 2*time.Minute)
	go func() {
		defer cancel()
		c.runLab(ctx, run, calls)
		// Free before done: whoever sees the run done may send the next.
		c.labRunning.Store(false)
		run.mu.Lock()
		run.Done = true
		run.mu.Unlock()
	}()
	// The first attempt claims the key at once, Stripe or no Stripe.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		keys, err := c.keys.FindKeys(r.Context(), run.Key, 1)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		if len(keys) == 1 {
			http.Redirect(w, r, "/keys/"+strconv.FormatInt(keys[0].ID, 10), http.StatusSeeOther)
			return
		}
		if loop.Sleep(r.Context(), 50*time.Millisecond) != nil {
			return
		}
	}
	http.Redirect(w, r, "/story?q="+urlQuery(run.Key), http.StatusSeeOther)
}

// runLab inflicts the scenario and plays the clients.
func (c *Console) runLab(ctx context.Context, run *labRun, calls int) {
	l := c.lab
	// The fake's faults meet every client, the simulator's too: a run
	// that sets any clears them however it ends, on a context of its
	// own, since the run's may be done (its timeout, a shutdown) and
	// would not let the request out. A run that sets none leaves the
	// fake's faults, whoever set them, alone.
	faulted := false
	setFaults := func(patch, what string) {
		faulted = true
		c.labSetFaults(ctx, run, patch, what)
	}
	defer func() {
		if !faulted {
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		c.labClearFaults(ctx, run, "The Stripe fake's faults are cleared.")
	}()
	switch run.Scenario.Name {
	case "dies_after_ride":
		resp := c.labPost(ctx, run.Key, true)
		c.labSaw(run, "client", 1, resp)
		run.add("client", "The client gives up and goes away, like an app that was closed.", "",
			Why{"Nothing is lost: the completer looks for keys left unfinished and drives them to the end through the same code as the api, resuming at the recovery point the ride's atomic phase committed. Watch the steps above for its attempt.", sectionMurphy})
		return
	case "stripe_down":
		setFaults(fmt.Sprintf(`{"fail_next":%d}`, calls),
			fmt.Sprintf("The Stripe fake will fail the next %d charge calls.", calls))
	case "answer_lost":
		setFaults(`{"drop_after_commit_next":1}`, "The Stripe fake will make the next charge and lose its answer.")
	case "slow_stripe":
		setFaults(fmt.Sprintf(`{"latency_ms":%d}`, (3*l.Timeout/2).Milliseconds()),
			fmt.Sprintf("The Stripe fake will take %s per charge; the client waits %s.", 3*l.Timeout/2, l.Timeout))
		resp := c.labPost(ctx, run.Key, false)
		c.labSaw(run, "client", 1, resp)
		setFaults(`{"latency_ms":0}`, "Stripe is fast again.")
		c.labRetry(ctx, run, "client", 2)
		return
	case "race":
		setFaults(fmt.Sprintf(`{"latency_ms":%d}`, (l.Timeout/2).Milliseconds()),
			"The Stripe fake slows down, so that the two requests overlap.")
		var wg sync.WaitGroup
		for _, name := range []string{"client A", "client B"} {
			wg.Go(func() { c.labRetry(ctx, run, name, 1) })
		}
		wg.Wait()
		return
	}
	c.labRetry(ctx, run, "client", 1)
}

// labRetry retries the ride, as a mobile app does: the same key, the same
// parameters, a wait that doubles, until a final answer.
func (c *Console) labRetry(ctx context.Context, run *labRun, client string, attempt int) {
	wait := labBackoff
	for ; attempt <= labAttempts; attempt++ {
		resp := c.labPost(ctx, run.Key, false)
		c.labSaw(run, client, attempt, resp)
		if resp.final() {
			return
		}
		if loop.Sleep(ctx, wait) != nil {
			return
		}
		wait = min(2*wait, 4*time.Second)
	}
	run.add(client, "The client gives up.", "", Why{"The completer will finish the request.", sectionMurphy})
}

// labResponse is what one attempt got.
type labResponse struct {
	Status   int
	Code     string
	Replayed bool
	Took     time.Duration
	Err      error
}

func (r labResponse) final() bool {
	return r.Err == nil && r.Status != http.StatusConflict && r.Status != http.StatusTooManyRequests && r.Status < 500
}

func (c *Console) labPost(ctx context.Context, key string, raiseError bool) labResponse {
	form := url.Values{
		"origin_lat": {"37.7749"}, "origin_lon": {"-122.4194"},
		"target_lat": {"37.8044"}, "target_lon": {"-122.2712"},
	}
	if raiseError {
		form.Set(rides.SimulateErrorParam, "true")
	}
	ctx, cancel := context.WithTimeout(ctx, c.lab.Timeout)
	defer cancel()
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.lab.APIURL, "/")+"/rides", strings.NewReader(form.Encode()))
	if err != nil {
		return labResponse{Err: err}
	}
	req.Header.Set("Authorization", "Bearer "+c.lab.Token)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.labClient.Do(req)
	if err != nil {
		return labResponse{Err: err, Took: time.Since(start)}
	}
	defer resp.Body.Close()
	var problem struct {
		Code string `json:"code"`
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	_ = json.Unmarshal(body, &problem)
	return labResponse{
		Status: resp.StatusCode, Code: problem.Code, Took: time.Since(start),
		Replayed: resp.Header.Get("Idempotent-Replayed") == "true",
	}
}

// labSaw records an attempt's answer and what it means.
func (c *Console) labSaw(run *labRun, client string, attempt int, r labResponse) {
	what := fmt.Sprintf("Attempt %d", attempt)
	var outcome string
	var w Why
	switch {
	case r.Err != nil && errors.Is(r.Err, context.DeadlineExceeded):
		outcome = fmt.Sprintf("no answer within %s", c.lab.Timeout)
		w = Why{"The client cannot know whether it was charged. It retries with the same Idempotency-Key, which is safe: the api runs a request once per key, and hands the retry the first one's result.", sectionMurphy}
	case r.Err != nil:
		outcome = "error: " + r.Err.Error()
		w = Why{"The connection failed; the client retries with the same key.", sectionMurphy}
	case r.Status == http.StatusCreated && r.Replayed:
		outcome = "201, replayed"
		w = Why{"The stored response was replayed: this client gets the first request's answer, and no second charge.", sectionMurphy}
	case r.Status == http.StatusCreated:
		outcome = "201 Created"
		w = Why{"Finished: one ride, one charge, and the response stored with the key for any retry to replay.", sectionMurphy}
	case r.Status == http.StatusConflict:
		outcome = "409 " + r.Code
		w = Why{"Another request holds the key's lock: the api never runs the same request twice at once. The client waits and tries again.", sectionMurphy}
	case r.Status == http.StatusInternalServerError && r.Code == "internal_error":
		outcome = "500 " + r.Code + " (the failure asked for)"
		w = Why{"The request died after the ride's atomic phase: the ride and recovery point ride_created committed together, and the key was unlocked there, so whoever comes next resumes from it instead of starting over.", sectionMurphy}
	case r.Status >= 500:
		outcome = strconv.Itoa(r.Status) + " " + r.Code
		w = Why{"Nothing past ride_created was recorded and the key was unlocked: the retry resumes there and charges with the same Stripe idempotency key, rocket-rides-<key id>.", sectionMurphy}
	default:
		outcome = strconv.Itoa(r.Status) + " " + r.Code
		w = Why{"A final answer: the client does not retry it.", sectionAssumptions}
	}
	if r.Err == nil {
		outcome += fmt.Sprintf(" after %s", r.Took.Round(time.Millisecond))
	}
	run.add(client, what, outcome, w)
}

// labSetFaults changes faults on the Stripe fake: patch is a JSON object
// of the faults to change (the fake's POST /_fake/faults).
func (c *Console) labSetFaults(ctx context.Context, run *labRun, patch, what string) {
	c.labFaults(ctx, run, http.MethodPost, strings.NewReader(patch), what)
}

// labClearFaults clears every fault on the Stripe fake (the fake's
// DELETE /_fake/faults).
func (c *Console) labClearFaults(ctx context.Context, run *labRun, what string) {
	c.labFaults(ctx, run, http.MethodDelete, nil, what)
}

// labFaults sends method, with body (JSON) when it is not nil, to the
// Stripe fake's faults endpoint, and adds to run what it did or why it
// could not.
func (c *Console) labFaults(ctx context.Context, run *labRun, method string, body io.Reader, what string) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.lab.StripeBase, "/")+"/_fake/faults", body)
	if err == nil {
		req.Header.Set("Authorization", "Bearer "+c.lab.StripeKey)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		var resp *http.Response
		if resp, err = c.labClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("%s (is STRIPE_API_BASE the Stripe fake?)", resp.Status)
			}
		}
	}
	if err != nil {
		c.logger.WarnContext(ctx, "Console lab could not set Stripe faults", slog.String("idempotency_key", run.Key), slog.Any("error", err))
		run.add("lab", what, "refused: "+err.Error(), Why{})
		return
	}
	run.add("lab", what, "", Why{})
}

// labFor is the lab's run of key, if the lab sent it.
func (c *Console) labFor(key *idem.Key) *labRun {
	if c.lab == nil {
		return nil
	}
	if run := c.labRuns.get(key.IdempotencyKey); run != nil {
		return run.view()
	}
	return nil
}

func labDefaults(l *Lab) *Lab {
	out := *l
	out.Timeout = cmp.Or(out.Timeout, DefaultLabTimeout)
	return &out
}
