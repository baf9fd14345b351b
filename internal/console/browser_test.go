package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/platform/project"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet/fleettest"
	"github.com/rocketrides/rocketrides/internal/testkit/otlpsink"
	"github.com/rocketrides/rocketrides/internal/user"
)

// chromium is Debian's chromium, which .ci/run installs where missing.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Fatal("no chromium on PATH: install Debian's chromium package (.ci/run does)")
	return ""
}

// browser starts a headless chromium with a fresh profile for t.
func browser(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	// A fresh profile; removed once the browser has gone (chromium may
	// still be writing to it as t.TempDir's cleanup would run).
	profile, err := os.MkdirTemp("", "console-browser-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(profile) })
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 900),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	return ctx
}

// screenshot saves the page under .data/console-screenshots/name.png, for
// a reviewer to look at.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	var png []byte
	require.NoError(t, chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)))
	root, err := project.Root()
	require.NoError(t, err)
	dir := filepath.Join(root, ".data", "console-screenshots")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}

const stripeKey = "sk_test_console"

// procStack is Rocket Rides as real processes (the Stripe fake, the api,
// the console, and a completer where asked), built by package fleet,
// over a fresh database; the test reads the database and the fake to
// check what the browser saw.
type procStack struct {
	fleet   *fleet.Fleet
	dbURL   string
	pool    *pgxpool.Pool
	stripe  *fleet.Process
	api     *fleet.Process
	console *fleet.Process
	token   string
}

// startStack starts the stack with env (KEY=VALUE) in every process, and
// adds the account "ada" (password password) as an operator would.
func startStack(t *testing.T, completer bool, env ...string) *procStack {
	t.Helper()
	dbURL := dbtest.NewURL(t)
	s := &procStack{token: "console-" + uuid.NewString(), dbURL: dbURL}
	s.fleet = fleettest.New(t, append([]string{
		"DATABASE_URL=" + dbURL, "STRIPE_API_KEY=" + stripeKey,
		"SEED_USER_TOKEN=" + s.token,
	}, env...)...)
	s.operator(t, password+"\n", 0, "add", "ada")
	s.stripe = fleettest.Start(t, s.fleet, "fakestripe")
	s.fleet.AddEnv("STRIPE_API_BASE=" + s.stripe.URL)
	fleettest.Run(t, s.fleet, "seed", nil)
	s.api = fleettest.Start(t, s.fleet, "api")
	s.fleet.AddEnv("CONSOLE_API_URL=" + s.api.URL)
	if completer {
		// Demo timings, shorter still: an abandoned request is finished
		// within a couple of seconds.
		fleettest.Start(t, s.fleet, "completer",
			"COMPLETER_MIN_AGE=1s", "COMPLETER_RETRY_INTERVAL=1s", "COMPLETER_POLL_INTERVAL=200ms")
	}
	s.console = fleettest.Start(t, s.fleet, "console")
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s.pool = pool
	return s
}

// operator runs `console operator args...` against the stack's database,
// with stdin, as a person at the console's host would, and requires it to
// exit with code; it returns what it wrote to stdout and stderr.
func (s *procStack) operator(t *testing.T, stdin string, code int, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.fleet.Binaries().Path("console"), append([]string{"operator"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + s.dbURL}
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	got := 0
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
		got = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	require.Equal(t, code, got, "console operator %q: %s%s", args, stdout.String(), stderr.String())
	return stdout.String(), stderr.String()
}

// postRide sends a ride to the api as the demo user.
func (s *procStack) postRide(t *testing.T, key string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.api.URL+"/rides",
		strings.NewReader("origin_lat=37.7749&origin_lon=-122.4194&target_lat=37.8044&target_lon=-122.2712"))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// stripeCharges is how many charges the Stripe fake has made.
func (s *procStack) stripeCharges(t *testing.T) int {
	t.Helper()
	resp, err := http.Get(s.stripe.URL + "/_fake/stats")
	require.NoError(t, err)
	defer resp.Body.Close()
	var stats map[string]int
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&stats))
	return stats["charges"]
}

// faults sets faults on the Stripe fake.
func (s *procStack) faults(t *testing.T, patch string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.stripe.URL+"/_fake/faults", strings.NewReader(patch))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+stripeKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

func (s *procStack) keyID(t *testing.T, key string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT id FROM idempotency_keys WHERE idempotency_key = $1`, key).Scan(&id))
	return id
}

func (s *procStack) rideStatus(t *testing.T, keyID int64) string {
	t.Helper()
	var status string
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT status FROM rides WHERE idempotency_key_id = $1`, keyID).Scan(&status))
	return status
}

// flag sets a new ride's key aside through the unknown-outcome path: the
// fake stores a 500 against Stripe's key, and the api (with
// MAX_CHARGE_ATTEMPTS=1) sets the key aside at once.
func (s *procStack) flag(t *testing.T) int64 {
	t.Helper()
	s.faults(t, `{"store_failure_next":1}`)
	key := uuid.NewString()
	require.Equal(t, http.StatusBadGateway, s.postRide(t, key))
	return s.keyID(t, key)
}

// chargeFor makes the charge Stripe "did" make for key keyID's request:
// one whose metadata names the key.
func (s *procStack) chargeFor(t *testing.T, keyID int64) string {
	t.Helper()
	gateway, err := payment.New(&payment.Config{APIKey: stripeKey, BaseURL: s.stripe.URL})
	require.NoError(t, err)
	var (
		customer string
		rideID   int64
	)
	require.NoError(t, s.pool.QueryRow(context.Background(), `
		SELECT u.stripe_customer_id, r.id FROM users u JOIN rides r ON r.user_id = u.id
		WHERE r.idempotency_key_id = $1`, keyID).Scan(&customer, &rideID))
	keys, err := idem.New(&idem.Config{Pool: s.pool, Actor: "test"})
	require.NoError(t, err)
	key, err := keys.KeyByID(context.Background(), keyID)
	require.NoError(t, err)
	var params rides.Params
	require.NoError(t, json.Unmarshal(key.RequestParams, &params))
	charge, err := gateway.Charge(context.Background(), payment.ChargeRequest{
		Customer: customer, Amount: rides.Price, Currency: rides.Currency,
		Metadata:       rides.ChargeRequest(user.User{ID: key.UserID, StripeCustomerID: customer}, key, params).Metadata,
		IdempotencyKey: "console-test-" + strconv.FormatInt(keyID, 10),
	})
	require.NoError(t, err)
	return charge.ID
}

func (s *procStack) login(t *testing.T, ctx context.Context, shot bool) {
	t.Helper()
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(s.console.URL+"/"),
		chromedp.WaitVisible(`#login`),
		// The account's name: a name without one is refused.
		chromedp.SendKeys(`input[name=operator]`, "ada"),
		chromedp.SendKeys(`input[name=password]`, password),
	))
	if shot {
		screenshot(t, ctx, "login")
	}
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Submit(`#login`),
		chromedp.WaitVisible(`#operator`),
	))
}

// fetchStatus has the page send a POST to path with form, from the
// page's own origin, and returns the status.
func fetchStatus(t *testing.T, ctx context.Context, path, form string) int {
	t.Helper()
	var status int
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(fmt.Sprintf(
		`fetch(%q, {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"}, body: %q, redirect: "manual"}).then(r => r.status)`,
		path, form), &status, func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) })))
	return status
}

// untilPage evaluates cond on the page until it holds, through the
// page's reloads of itself.
func untilPage(t *testing.T, ctx context.Context, timeout time.Duration, what, cond string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var ok bool
		err := chromedp.Run(ctx, chromedp.Evaluate(`document.readyState === "complete" && (`+cond+`)`, &ok))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			var text string
			_ = chromedp.Run(ctx, chromedp.Text(`main`, &text))
			t.Fatalf("%s: timed out after %s waiting for %s (last error %v); the page:\n%s", what, timeout, cond, err, text)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestBrowser(t *testing.T) {
	t.Parallel()

	// Log in, watch the overview count a ride made after the page loaded,
	// follow the ride's story, run every lab scenario, and open River UI.
	t.Run("OverviewLabAndRiverUI", func(t *testing.T) {
		t.Parallel()
		s := startStack(t, true, "SIMULATED_ERRORS=true", "CONSOLE_LAB_TIMEOUT=1s")
		ctx := browser(t, 100*time.Second)

		// River UI, like every page, wants a login first.
		var path string
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(s.console.URL+"/river/"),
			chromedp.WaitVisible(`#login`),
			chromedp.Evaluate(`location.pathname`, &path),
		))
		require.Equal(t, "/login", path)

		s.login(t, ctx, true)
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(s.console.URL+"/"),
			chromedp.WaitVisible(`.live`), // the event stream is connected
			chromedp.WaitVisible(`[data-field="rides.succeeded"]`),
		))
		// One time zone on every page, labelled: the live clock is UTC
		// like the story's times, not the browser's local time.
		var live string
		require.NoError(t, chromedp.Run(ctx, chromedp.Text(`#live`, &live)))
		require.Regexp(t, `^live · \d\d:\d\d:\d\d UTC$`, live)
		var before, commits string
		require.NoError(t, chromedp.Run(ctx, chromedp.Text(`[data-field="rides.succeeded"]`, &before)))
		require.Equal(t, "0", before)
		// Who confirms commits, kept current by the event stream: the
		// test cluster's primary alone.
		require.NoError(t, chromedp.Run(ctx, chromedp.Text(`[data-field="commits"]`, &commits)))
		require.Equal(t, "confirmed by the primary alone (no standby)", commits)

		key := uuid.NewString()
		require.Equal(t, http.StatusCreated, s.postRide(t, key))
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Poll(`document.querySelector('[data-field="rides.succeeded"]').textContent === "1"`, nil,
				chromedp.WithPollingTimeout(10*time.Second)),
		))
		screenshot(t, ctx, "overview")

		var point string
		require.NoError(t, chromedp.Run(ctx,
			chromedp.SendKeys(`header input[name=q]`, key),
			chromedp.Submit(`header form.search`),
			chromedp.WaitVisible(`#steps`),
			chromedp.Text(`#recovery-point`, &point),
		))
		require.Equal(t, "finished", point)
		var charges int
		require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll('tr.charge').length`, &charges)))
		require.Equal(t, 1, charges, "exactly one charge at Stripe")
		var when string
		require.NoError(t, chromedp.Run(ctx, chromedp.Text(`#steps tr.step td`, &when)))
		require.Regexp(t, `^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC$`, when)
		screenshot(t, ctx, "story")

		// Each step's sentence links its section of docs/failures.md,
		// which the console serves.
		var href string
		require.NoError(t, chromedp.Run(ctx,
			chromedp.AttributeValue(`#steps a.why`, "href", &href, nil),
			chromedp.Click(`#steps a.why`),
			chromedp.WaitVisible(`#doc`),
		))
		anchor := strings.TrimPrefix(href, "/docs/failures#")
		require.NotEqual(t, href, anchor, "links the console's copy of docs/failures.md")
		var found bool
		require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(fmt.Sprintf(`document.getElementById(%q) !== null`, anchor), &found)))
		require.True(t, found, "the section %q exists", anchor)

		// The lab: each scenario ends with the key finished and one
		// charge, at Stripe and on the story page.
		for _, scenario := range []string{"dies_after_ride", "stripe_down", "answer_lost", "slow_stripe", "race"} {
			chargesBefore := s.stripeCharges(t)
			require.NoError(t, chromedp.Run(ctx,
				chromedp.Navigate(s.console.URL+"/lab"),
				chromedp.WaitVisible(`#lab-form`),
				chromedp.Click(`#scenario-`+scenario),
				chromedp.Click(`#send`),
				chromedp.WaitVisible(`#lab`),
			), "scenario %s", scenario)
			// The story reloads itself until the key has finished and
			// the lab's clients are done.
			untilPage(t, ctx, 30*time.Second, "scenario "+scenario,
				`document.getElementById("recovery-point").textContent === "finished" && document.getElementById("lab-state").textContent.includes("done")`)
			require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll('tr.charge').length`, &charges)))
			require.Equal(t, 1, charges, "scenario %s: one charge on the story page", scenario)
			require.Equal(t, chargesBefore+1, s.stripeCharges(t), "scenario %s: one charge at the fake", scenario)
			var events, links int
			require.NoError(t, chromedp.Run(ctx,
				chromedp.Evaluate(`document.querySelectorAll('tr.lab-event').length`, &events),
				chromedp.Evaluate(`document.querySelectorAll('#lab a.why[href^="/docs/failures#"]').length`, &links),
			))
			require.Positive(t, events, "scenario %s", scenario)
			require.Positive(t, links, "scenario %s: the sentences link docs/failures.md", scenario)
			if scenario == "answer_lost" {
				// The loss is seen, not absorbed by stripe-go's own retry:
				// the api answered attempt 1 with a 503, the fake dropped
				// every answer it gave, and the retry heard the one charge.
				var attempts []string
				var labText, stripeKey string
				require.NoError(t, chromedp.Run(ctx,
					chromedp.Evaluate(`Array.from(document.querySelectorAll('#lab tr.lab-event')).filter(r => r.cells[2].textContent.startsWith("Attempt")).map(r => r.cells[2].textContent + ": " + r.cells[3].textContent)`, &attempts),
					chromedp.Text(`#lab`, &labText),
					chromedp.Text(`#stripe-key`, &stripeKey),
				))
				// On a loaded machine the first retry may still find attempt
				// 1 finishing (409) and the next one replay its answer, or
				// the stack's completer (1s timings, where attempt 1 alone
				// takes stripe-go's 1.5s of resends) may resume the released
				// key first, and the retry replay what it stored: what must
				// hold is the lost answer first, the 201 last, no second
				// charge in between, and the same Stripe key named.
				require.GreaterOrEqual(t, len(attempts), 2, "attempts: %v", attempts)
				require.True(t, strings.HasPrefix(attempts[0], "Attempt 1: 503 payment_unavailable"), attempts[0])
				require.Regexp(t, `^Attempt \d+: 201`, attempts[len(attempts)-1])
				for _, a := range attempts[1 : len(attempts)-1] {
					require.Contains(t, a, "409 request_in_progress", "attempts: %v", attempts)
				}
				require.Regexp(t, `Its record of attempt 1 \(GET /_fake/stats\): (\d+) charge requests, 1 charge made, \d+ replays?, (\d+) answers dropped`, labText)
				require.Regexp(t, `Its record of the retry: \d+ charge requests?, 0 charges made`, labText)
				require.Regexp(t, `^rocket-rides-\d+-[0-9a-f]{64}$`, stripeKey)
				require.Contains(t, labText, "same Stripe idempotency key, "+stripeKey)
			}
			screenshot(t, ctx, "lab-"+scenario)
		}
		var steps string
		require.NoError(t, chromedp.Run(ctx, chromedp.Text(`#lab`, &steps)))
		require.Contains(t, steps, "409", "in the race, one client was told another held the key")

		// River UI, behind the login.
		var title string
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(s.console.URL+"/river/"),
			chromedp.Poll(`document.title.includes("River")`, nil, chromedp.WithPollingTimeout(10*time.Second)),
			chromedp.Title(&title),
			chromedp.Sleep(time.Second), // let its script draw
		))
		require.Contains(t, title, "River")
		screenshot(t, ctx, "river")
	})

	// A real api exports a ride's spans to an OTLP receiver; the ride's
	// story links to its trace there, and the link lands on a page that
	// lists the ride's spans. A console without CONSOLE_TRACE_URL links
	// nothing.
	t.Run("LinksTheStoryToItsTrace", func(t *testing.T) {
		t.Parallel()
		sink, err := otlpsink.Start()
		require.NoError(t, err)
		t.Cleanup(sink.Close)
		s := startStack(t, false, append(sink.Env("grpc"), "CONSOLE_TRACE_URL="+sink.HTTP+"/trace/{trace_id}")...)
		key := uuid.NewString()
		require.Equal(t, http.StatusCreated, s.postRide(t, key))
		story := "/keys/" + strconv.FormatInt(s.keyID(t, key), 10)

		ctx := browser(t, 60*time.Second)
		s.login(t, ctx, false)
		var href, traceID string
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(s.console.URL+story),
			chromedp.WaitVisible(`#trace`),
			chromedp.AttributeValue(`#trace`, "href", &href, nil),
			chromedp.Text(`#trace`, &traceID),
		))
		require.Regexp(t, `^[0-9a-f]{32}$`, traceID)
		require.Equal(t, sink.HTTP+"/trace/"+traceID, href)
		screenshot(t, ctx, "story-trace")

		// The api sends its spans in batches: the last phase's may still
		// be on its way when the ride's answer has come back.
		waitCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.True(t, sink.Await(waitCtx, func(spans []otlpsink.Span) bool {
			return slices.ContainsFunc(spans, func(sp otlpsink.Span) bool {
				return sp.TraceID == traceID && strings.HasSuffix(sp.OperationName, "-> finished")
			})
		}), "the ride's last phase reached the receiver")

		var names, services []string
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Click(`#trace`),
			chromedp.WaitVisible(`tr.span`),
			chromedp.Evaluate(`Array.from(document.querySelectorAll('tr.span')).map(r => r.cells[0].textContent)`, &names),
			chromedp.Evaluate(`Array.from(new Set(Array.from(document.querySelectorAll('tr.span')).map(r => r.cells[1].textContent)))`, &services),
		))
		require.Contains(t, names, "claim")
		require.Contains(t, names, "stripe charge")
		require.True(t, slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "phase started -> ride_created") }), "spans: %v", names)
		require.True(t, slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, "-> finished") }), "spans: %v", names)
		require.Contains(t, services, "api")
		screenshot(t, ctx, "trace")

		// Without a trace viewer the same story has no link. A browser's
		// cookies do not tell ports apart, and both consoles keep their
		// sessions in the same database: ada is logged in there too.
		plain := fleettest.Start(t, s.fleet, "console", "CONSOLE_TRACE_URL=")
		var links int
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(plain.URL+story),
			chromedp.WaitVisible(`#steps`),
			chromedp.Evaluate(`document.querySelectorAll('#trace').length`, &links),
		))
		require.Zero(t, links)
	})

	// Flag keys through the unknown-outcome path and settle one with each
	// of the three actions; refuse an action on a key another request
	// holds, one from a page of another origin, and one without login.
	t.Run("SettlesAndRefuses", func(t *testing.T) {
		t.Parallel()
		s := startStack(t, false, "MAX_CHARGE_ATTEMPTS=1")
		closed, released, adopted, held, foreign := s.flag(t), s.flag(t), s.flag(t), s.flag(t), s.flag(t)
		chargeID := s.chargeFor(t, adopted)

		ctx := browser(t, 60*time.Second)
		s.login(t, ctx, false)
		id := func(n int64) string { return strconv.FormatInt(n, 10) }

		// Without simulated errors there is no lab.
		var labLinks int
		require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll('#nav-lab').length`, &labLinks)))
		require.Zero(t, labLinks)
		resp, err := http.Get(s.console.URL + "/lab")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNotFound, resp.StatusCode)

		var msg string
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(s.console.URL+"/attention"),
			chromedp.WaitVisible(`#key-`+id(adopted)),
		))
		screenshot(t, ctx, "attention")
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Click(`#key-`+id(closed)+` button.close`),
			chromedp.WaitVisible(`#message`),
			chromedp.Text(`#message`, &msg),
		))
		require.Contains(t, msg, "Closed as failed")
		require.Equal(t, "failed", s.rideStatus(t, closed))

		require.NoError(t, chromedp.Run(ctx,
			chromedp.Click(`#key-`+id(released)+` button.release`),
			// Released, the key is no longer set aside: its card goes.
			chromedp.WaitNotPresent(`#key-`+id(released)),
			chromedp.Text(`#message`, &msg),
		))
		require.Contains(t, msg, "Released")
		require.Equal(t, "pending", s.rideStatus(t, released))

		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(s.console.URL+"/keys/"+id(adopted)),
			chromedp.WaitVisible(`#adopt`),
			chromedp.Click(`#adopt`),
			chromedp.WaitVisible(`#message`),
			chromedp.Text(`#message`, &msg),
		))
		require.Contains(t, msg, chargeID)
		require.Equal(t, "succeeded", s.rideStatus(t, adopted))
		require.Equal(t, 1, s.stripeCharges(t), "the charge was adopted, not made again")
		screenshot(t, ctx, "settled")

		// Another request holds the key: the action is refused and says so.
		keys, err := idem.New(&idem.Config{Pool: s.pool, Actor: "test"})
		require.NoError(t, err)
		_, err = keys.ClaimByID(context.Background(), held, nil)
		require.NoError(t, err)
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(s.console.URL+"/keys/"+id(held)),
			chromedp.WaitVisible(`#release`),
			chromedp.Click(`#release`),
			chromedp.WaitVisible(`#error`),
			chromedp.Text(`#error`, &msg),
		))
		require.Contains(t, msg, "another request holds this key")
		require.Equal(t, "needs_review", s.rideStatus(t, held))
		screenshot(t, ctx, "refused-held")

		// A page of another origin posts the console's own form, token
		// and all, with the operator's cookie: refused.
		var token string
		require.NoError(t, chromedp.Run(ctx, chromedp.Value(`input[name=csrf]`, &token, chromedp.ByQuery)))
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<form id="evil" method="post" action="%s/keys/%d/close"><input type="hidden" name="csrf" value="%s"></form>
<script>document.getElementById("evil").submit()</script>`, s.console.URL, foreign, token)
		}))
		t.Cleanup(evil.Close)
		var body string
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(evil.URL),
			chromedp.Poll(`document.body && document.body.innerText.includes("did not come from this console")`, nil,
				chromedp.WithPollingTimeout(10*time.Second)),
			chromedp.Text(`body`, &body),
		))
		require.Contains(t, body, "Refused")
		require.Equal(t, "needs_review", s.rideStatus(t, foreign))

		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(s.console.URL+"/abandoned"),
			chromedp.WaitVisible(`main h1`),
		))
		screenshot(t, ctx, "abandoned")
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(s.console.URL+"/reconciliation"),
			chromedp.WaitVisible(`#never`),
		))
		screenshot(t, ctx, "reconciliation")

		// Logged out, the same form from the console's own page is
		// refused, and so is River UI's API.
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Click(`form.logout button`),
			chromedp.WaitVisible(`#login`),
		))
		require.Equal(t, http.StatusUnauthorized, fetchStatus(t, ctx, "/keys/"+id(foreign)+"/close", "csrf="+token))
		require.Equal(t, http.StatusUnauthorized, fetchStatus(t, ctx, "/river/api/jobs/cancel", `{"ids":["1"]}`))
		require.Equal(t, "needs_review", s.rideStatus(t, foreign))
	})
}
