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

	rrclient "github.com/rocketrides/rocketrides/client"
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
	// labBackoff is the ceiling of the client's first wait between
	// attempts, doubled after each up to labMaxBackoff.
	labBackoff    = 250 * time.Millisecond
	labMaxBackoff = 4 * time.Second
	// labAttempts is how often the lab's client tries before it leaves
	// the request to the completer, as an app that was closed does.
	labAttempts = 8
	// maxLabCalls is the most charge calls Stripe can be down for (N).
	maxLabCalls = 5
	// labLostAnswers is how many answers the Stripe fake may drop while
	// the answer-lost scenario's first attempt runs: more than the api's
	// Stripe client sends in one call (1 + stripe-go's MaxNetworkRetries,
	// 2 by default), so that every one is lost whatever the api's count.
	// The lab turns the fault off once the api has answered.
	labLostAnswers = 10
	// labPatience bounds the answer-lost scenario's first attempt, which
	// waits for the api's answer: stripe-go spaces its resends out (half a
	// second, then a second), longer than a client's usual timeout, and
	// the lesson is what the api answers, not the client's patience.
	labPatience = 30 * time.Second
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
		"The fake answers the next N charge calls with a 500 before charging (stripe-go does not resend a POST answered 500, so each is one attempt of the client). A Stripe 500 may have charged, so the api counts it as an unknown outcome, answers 503 and keeps the key at ride_created; the client retries with the same key and backoff. (Past MAX_CHARGE_ATTEMPTS such answers the key would be set aside for a person.)"},
	{"answer_lost", "Stripe charges, then the answer is lost",
		"The fake makes the charge and drops the connection instead of answering, and keeps dropping answers until the api has answered: the resends of the api's Stripe client (stripe-go retries a broken connection with the same Stripe idempotency key) get the charge replayed, and lose that answer too. The api answers 503 with the ride pending; the client retries with the same key, and Stripe replays the one charge. Losing only the answer that made the charge would show nothing: stripe-go would hear the replay inside the first attempt. So the api runs as it always does, stripe-go's retry included, and only the fake's network is worse. The first attempt waits for the api's answer (up to " + labPatience.String() + "), so that you see it."},
	{"slow_stripe", "Stripe is slower than the client's timeout",
		"The fake waits longer than the client's timeout before charging. The client gives up on its first attempt and retries with the same key."},
	{"race", "Two clients race one key",
		"Two clients send the same request with the same key, the second while the first holds it and Stripe is slow."},
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
		c.labSend(ctx, run, "client", 1, 1, l.Timeout, true)
		run.add("client", "The client gives up and goes away, like an app that was closed.", "",
			Why{"Nothing is lost: the completer looks for keys left unfinished and drives them to the end through the same code as the api, resuming at the recovery point the ride's atomic phase committed. Watch the steps above for its attempt.", sectionMurphy})
		return
	case "stripe_down":
		setFaults(fmt.Sprintf(`{"fail_next":%d}`, calls),
			fmt.Sprintf("The Stripe fake will fail the next %d charge calls.", calls))
	case "answer_lost":
		c.labAnswerLost(ctx, run, setFaults)
		return
	case "slow_stripe":
		setFaults(fmt.Sprintf(`{"latency_ms":%d}`, (3*l.Timeout/2).Milliseconds()),
			fmt.Sprintf("The Stripe fake will take %s per charge; the client waits %s.", 3*l.Timeout/2, l.Timeout))
		c.labSend(ctx, run, "client", 1, 1, l.Timeout, false)
		setFaults(`{"latency_ms":0}`, "Stripe is fast again.")
		c.labRetry(ctx, run, "client", 2)
		return
	case "race":
		setFaults(fmt.Sprintf(`{"latency_ms":%d}`, (l.Timeout/2).Milliseconds()),
			"The Stripe fake slows down, so that the two requests overlap.")
		// Client B sets off once client A holds the key, so that it
		// meets A's lock however slowly either client starts.
		var wg sync.WaitGroup
		wg.Go(func() { c.labRetry(ctx, run, "client A", 1) })
		c.labAwaitLock(ctx, run)
		wg.Go(func() { c.labRetry(ctx, run, "client B", 1) })
		wg.Wait()
		return
	}
	c.labRetry(ctx, run, "client", 1)
}

// labAnswerLost is the answer-lost scenario. Stripe's answer must reach
// no one for the lesson to show: the api's Stripe client is stripe-go,
// which resends a request whose connection broke with the same Stripe
// idempotency key, and a fake that lost only the answer that made the
// charge (drop_after_commit_next) would have its replay heard inside the
// api's first attempt, a clean 201. Rather than run the api otherwise than
// it runs everywhere (its retry off), the lab has the fake lose every
// answer (drop_answer_next, charges and replays alike) until the api has
// answered; then Stripe answers again, and the client's retry resumes at
// ride_created and hears the one charge replayed. The fake's own counts
// (GET /_fake/stats), read before and after, show what it did.
func (c *Console) labAnswerLost(ctx context.Context, run *labRun, setFaults func(patch, what string)) {
	start, startErr := c.labStripeCounts(ctx)
	setFaults(fmt.Sprintf(`{"drop_answer_next":%d}`, labLostAnswers),
		"The Stripe fake will carry out every charge request it gets and drop the connection instead of answering, until the api has answered the client.")
	resp := c.labSend(ctx, run, "client", 1, 1, labPatience, false)
	setFaults(`{"drop_answer_next":0}`, "The Stripe fake answers again.")
	key := c.labKey(ctx, run) // read once: the retry resumes this same key
	stripeKey := labStripeKey(key)
	lost, lostErr := c.labStripeCounts(ctx)
	if err := errors.Join(startErr, lostErr); err != nil {
		run.add("lab", "The Stripe fake's counts could not be read.", "refused: "+err.Error(), Why{})
	} else {
		d := lost.minus(start)
		why := fmt.Sprintf("Each request carried the ride's Stripe idempotency key, %s (rocket-rides-<user id>-<SHA-256 of the client's key>).", stripeKey)
		if d.Charges == 1 && d.Replays > 0 && d.Replays == d.ChargeRequests-1 {
			why += " The first made the charge. stripe-go, the api's Stripe client, resent it on the broken connection with the same key" +
				" (its MaxNetworkRetries, 2 by default), and Stripe replayed the charge to each resend instead of making another."
		}
		if d.ChargeRequests > 0 && d.DroppedAnswers >= d.ChargeRequests {
			why += " No answer got through, so the api recorded nothing past ride_created: the charge exists at Stripe, and the ride is pending."
		}
		run.add("Stripe fake", fmt.Sprintf("Its record of attempt 1 (GET /_fake/stats): %s, %s made, %s, %s dropped.",
			plural(d.ChargeRequests, "charge request"), plural(d.Charges, "charge"), plural(d.Replays, "replay"), plural(d.DroppedAnswers, "answer")), "",
			Why{why, sectionAssumptions})
	}
	if resp.Final {
		return // a final answer after all: nothing to retry
	}
	c.labRetry(ctx, run, "client", 2)
	end, endErr := c.labStripeCounts(ctx)
	if startErr != nil || lostErr != nil || endErr != nil {
		return
	}
	d, total := end.minus(lost), end.minus(start)
	what := fmt.Sprintf("Its record of the retry: %s, %s made, %s.",
		plural(d.ChargeRequests, "charge request"), plural(d.Charges, "charge"), plural(d.Replays, "replay"))
	run.add("Stripe fake", what, "", answerLostWhy(c.labResumedBy(ctx, key), d, total, stripeKey))
}

// answerLostWhy says what the fake's counts over the retry (retry) and
// over the whole ride (total) show, given the process that resumed the
// key (by, empty if unknown). The key was released at ride_created, and
// the completer looks for such keys too: where it runs with short timings
// it may resume the key before the client's retry does, and the retry
// then replays the stored answer.
func answerLostWhy(by string, retry, total stripeCounts, stripeKey string) Why {
	w := Why{fmt.Sprintf("%s made while this ride ran.", plural(total.Charges, "charge")), sectionAssumptions}
	switch {
	case total.Charges != 1:
	case by != "" && by != idem.DefaultActor && total.Replays > 0:
		w.Text = fmt.Sprintf("The %s found the released key before the client's retry did: it resumed at ride_created and asked Stripe "+
			"for the charge again with the same Stripe idempotency key, %s, and Stripe replayed the charge attempt 1 had made; the retry "+
			"got the stored answer. One ride, one charge, for %s: the Stripe key, derived from our key's row, made the resumption safe, "+
			"whoever resumed.", by, stripeKey, plural(total.ChargeRequests, "charge request"))
	case retry.Charges == 0 && retry.Replays > 0:
		w.Text = fmt.Sprintf("The retry resumed at ride_created and asked Stripe for the charge again with the same Stripe idempotency key, %s, "+
			"and Stripe replayed the charge attempt 1 had made. One ride, one charge, for %s: "+
			"the Stripe key, derived from our key's row, made the retry safe.", stripeKey, plural(total.ChargeRequests, "charge request"))
	}
	return w
}

// labResumedBy is the process (idem.Config.Actor) that last resumed or
// took over key, as its steps record; empty if none did, or if the key or
// its steps could not be read (key nil).
func (c *Console) labResumedBy(ctx context.Context, key *idem.Key) string {
	if key == nil {
		return ""
	}
	steps, err := c.keys.Steps(ctx, key.ID)
	if err != nil {
		return ""
	}
	by := ""
	for _, s := range steps {
		if s.Event == idem.StepResumed || s.Event == idem.StepTookOver {
			by = s.Actor
		}
	}
	return by
}

// labStripeKey is the Stripe idempotency key of key's request, or its
// pattern if the key could not be read (nil).
func labStripeKey(key *idem.Key) string {
	if key != nil {
		return rides.StripeKey(key)
	}
	return "rocket-rides-<user id>-<SHA-256 of the client's key>"
}

// labKey is run's idempotency key, or nil if it cannot be read.
func (c *Console) labKey(ctx context.Context, run *labRun) *idem.Key {
	keys, err := c.keys.FindKeys(ctx, run.Key, 1)
	if err != nil || len(keys) == 0 {
		return nil
	}
	return keys[0]
}

// labAwaitLock waits, up to the lab's timeout, until a request holds
// the run's key.
func (c *Console) labAwaitLock(ctx context.Context, run *labRun) {
	ctx, cancel := context.WithTimeout(ctx, c.lab.Timeout)
	defer cancel()
	for ctx.Err() == nil {
		if key := c.labKey(ctx, run); key != nil && key.LockedAt != nil {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// stripeCounts is the part of the Stripe fake's GET /_fake/stats the lab
// reads. The counts are the fake's, not the run's: a simulator ride sent
// meanwhile is counted too.
type stripeCounts struct {
	Charges        int `json:"charges"`
	ChargeRequests int `json:"charge_requests"`
	Replays        int `json:"replays"`
	DroppedAnswers int `json:"dropped_answers"`
}

func (a stripeCounts) minus(b stripeCounts) stripeCounts {
	return stripeCounts{
		Charges: a.Charges - b.Charges, ChargeRequests: a.ChargeRequests - b.ChargeRequests,
		Replays: a.Replays - b.Replays, DroppedAnswers: a.DroppedAnswers - b.DroppedAnswers,
	}
}

// labStripeCounts reads the Stripe fake's counts.
func (c *Console) labStripeCounts(ctx context.Context) (stripeCounts, error) {
	var counts stripeCounts
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(c.lab.StripeBase, "/")+"/_fake/stats", nil)
	if err != nil {
		return counts, err
	}
	resp, err := c.labClient.Do(req)
	if err != nil {
		return counts, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return counts, fmt.Errorf("GET /_fake/stats: %s (is STRIPE_API_BASE the Stripe fake?)", resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&counts); err != nil {
		return counts, fmt.Errorf("GET /_fake/stats: %w", err)
	}
	return counts, nil
}

// plural is n things, in words: "1 charge", "3 charges".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}

// labRetry retries the ride, as a mobile app does, through the client
// package: the same key, the same parameters, backoff with jitter and
// Retry-After, until a final answer. attempt numbers its first try.
func (c *Console) labRetry(ctx context.Context, run *labRun, client string, attempt int) {
	if resp := c.labSend(ctx, run, client, attempt, labAttempts-attempt+1, c.lab.Timeout, false); !resp.Final && ctx.Err() == nil {
		run.add(client, "The client gives up.", "", Why{"The completer will finish the request.", sectionMurphy})
	}
}

// labResponse is what one attempt got.
type labResponse struct {
	Status   int
	Code     string
	Replayed bool
	Took     time.Duration
	Err      error
	// Timeout is how long the client would wait.
	Timeout time.Duration
	// Final: the answer ends the client's retries (the client package's
	// rule, which follows the api's Rocket-Rides-Should-Retry).
	Final bool
}

// labSend sends the lab's ride up to attempts times, recording each
// attempt on run as client's, numbered from first, and returns the last
// attempt's answer.
func (c *Console) labSend(ctx context.Context, run *labRun, client string, first, attempts int, timeout time.Duration, raiseError bool) labResponse {
	var last labResponse
	c.labClientSend(ctx, run.Key, attempts, timeout, raiseError, func(a rrclient.Attempt) {
		last = labResponseOf(a, timeout)
		c.labSaw(run, client, first+a.N-1, last)
	})
	return last
}

// labClientSend sends the lab's ride with the client package, each
// attempt bounded by timeout, and hands every attempt to onAttempt.
func (c *Console) labClientSend(ctx context.Context, key string, attempts int, timeout time.Duration, raiseError bool, onAttempt func(rrclient.Attempt)) {
	cl, err := rrclient.New(&rrclient.Config{
		URL: c.lab.APIURL, Token: c.lab.Token, HTTPClient: c.labClient, AttemptTimeout: timeout,
		MaxAttempts: attempts, BaseDelay: labBackoff, MaxDelay: labMaxBackoff,
		UserAgent: "rocketrides-console-lab", OnAttempt: onAttempt,
	})
	if err != nil {
		onAttempt(rrclient.Attempt{N: 1, Err: err})
		return
	}
	p := rrclient.RideParams{OriginLat: 37.7749, OriginLon: -122.4194, TargetLat: 37.8044, TargetLon: -122.2712, IdempotencyKey: key}
	if raiseError {
		p.Extra = url.Values{rides.SimulateErrorParam: {"true"}}
	}
	_, _ = cl.CreateRide(ctx, p) // every attempt went to onAttempt
}

func labResponseOf(a rrclient.Attempt, timeout time.Duration) labResponse {
	r := labResponse{Status: a.Status, Code: a.Code, Replayed: a.Replayed, Took: a.Latency, Err: a.Err, Final: a.Final}
	if a.Err != nil {
		r.Timeout = timeout
	}
	return r
}

// labSaw records an attempt's answer and what it means.
func (c *Console) labSaw(run *labRun, client string, attempt int, r labResponse) {
	what := fmt.Sprintf("Attempt %d", attempt)
	var outcome string
	var w Why
	switch {
	case r.Err != nil && errors.Is(r.Err, context.DeadlineExceeded):
		outcome = fmt.Sprintf("no answer within %s", r.Timeout)
		w = Why{"The client cannot know whether it was charged. It retries with the same Idempotency-Key, which is safe: the api resumes the request where it stopped, and once it has finished, hands every retry the stored answer.", sectionMurphy}
	case r.Err != nil:
		outcome = "error: " + r.Err.Error()
		w = Why{"The connection failed; the client retries with the same key.", sectionMurphy}
	case r.Status == http.StatusCreated && r.Replayed:
		outcome = "201, replayed"
		w = Why{"The stored response was replayed: this client gets the first request's answer, and no second charge.", sectionMurphy}
	case r.Status == http.StatusCreated:
		outcome = "201 Created"
		w = Why{"Finished: one ride, one charge, and the response stored with the key for any retry to replay.", sectionMurphy}
	case r.Status == http.StatusConflict && r.Code == "request_taken_over":
		outcome = "409 " + r.Code
		w = Why{"This attempt stalled and another took its key over with a fresh lock token: the fence kept this one from writing. The client retries with the same key to get the result.", sectionMurphy}
	case r.Status == http.StatusConflict:
		outcome = "409 " + r.Code
		w = Why{"Another request holds the key's lock: the api never runs the same request twice at once. The client waits and tries again.", sectionMurphy}
	case r.Status == http.StatusInternalServerError && r.Code == "internal_error" && run.Scenario.Name == "dies_after_ride" && attempt == 1:
		outcome = "500 " + r.Code + " (the failure asked for)"
		w = Why{"The request died after the ride's atomic phase: the ride and recovery point ride_created committed together, and the key was unlocked there, so whoever comes next resumes from it instead of starting over.", sectionMurphy}
	case r.Status == http.StatusServiceUnavailable && r.Code == "payment_unavailable":
		outcome = strconv.Itoa(r.Status) + " " + r.Code
		w = Why{"Stripe gave the api no usable answer, so nothing past ride_created was recorded: the ride is pending, and the key was unlocked there. The retry resumes at ride_created and asks Stripe again with the same Stripe idempotency key, rocket-rides-<user id>-<SHA-256 of the client's key>: a charge Stripe already made is replayed, not made again.", sectionMurphy}
	case r.Status == http.StatusBadGateway && r.Code == "payment_needs_review":
		outcome = strconv.Itoa(r.Status) + " " + r.Code
		w = Why{"Stripe's answer stayed unknown too often (MAX_CHARGE_ATTEMPTS): the key is set aside for a person and the ride is needs_review. No retry or completer touches it until someone settles it (Needs attention), so the client stops here.", sectionResidual}
	case r.Status >= 500:
		outcome = strconv.Itoa(r.Status) + " " + r.Code
		w = Why{"An error the api did not store: the key was unlocked at its last committed recovery point, and the retry resumes from there.", sectionMurphy}
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
