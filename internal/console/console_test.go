package console_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/console"
	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/operator"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

const password = "correct horse"

type testBundle struct {
	*apitest.Stack
	operators *operator.Store // the account "ada", password password
	console   *httptest.Server
	client    *http.Client // logged in, cookies kept, redirects not followed
}

func setup(t *testing.T) *testBundle { return setupWith(t, nil) }

// setupWith is setup with the lab that lab configures against the
// bundle's api and Stripe fake (nil: no lab).
func setupWith(t *testing.T, lab func(*apitest.Stack) *console.Lab) *testBundle {
	t.Helper()
	// The lab runs only where the api takes simulated errors, as in
	// make dev.
	b := &testBundle{Stack: apitest.New(t, apitest.Options{MaxChargeAttempts: 1, SimulatedErrors: lab != nil})}
	var labConfig *console.Lab
	if lab != nil {
		labConfig = lab(b.Stack)
	}
	keys, err := idem.New(&idem.Config{Pool: b.Pool, Actor: "console"})
	require.NoError(t, err)
	svc, err := rides.NewService(&rides.ServiceConfig{Pool: b.Pool, Keys: keys, Payments: b.Gateway})
	require.NoError(t, err)
	b.operators, err = operator.New(&operator.Config{Pool: b.Pool})
	require.NoError(t, err)
	_, err = b.operators.Add(context.Background(), "ada", password)
	require.NoError(t, err)
	h, err := console.New(&console.Config{Pool: b.Pool, Keys: keys, Rides: svc, Operators: b.operators, Lab: labConfig, Hosts: []string{"127.0.0.1"}})
	require.NoError(t, err)
	b.console = httptest.NewServer(h)
	t.Cleanup(b.console.Close)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	b.client = &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return b
}

// post sends a form as a page of origin would.
func (b *testBundle) post(t *testing.T, path, origin string, form url.Values) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.console.URL+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := b.client.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func (b *testBundle) get(t *testing.T, path string) (*http.Response, string) {
	t.Helper()
	resp, err := b.client.Get(b.console.URL + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

func (b *testBundle) login(t *testing.T) {
	t.Helper()
	resp := b.post(t, "/login", b.console.URL, url.Values{"operator": {"ada"}, "password": {password}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	cookie := resp.Header.Get("Set-Cookie")
	require.Contains(t, cookie, "HttpOnly")
	require.Contains(t, cookie, "SameSite=Strict")
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (b *testBundle) csrf(t *testing.T) string {
	t.Helper()
	_, body := b.get(t, "/attention")
	m := csrfField.FindStringSubmatch(body)
	require.NotNil(t, m, body)
	return m[1]
}

// flag sets a new ride's key aside through the unknown-outcome path and
// returns the key's id.
func (b *testBundle) flag(t *testing.T) int64 {
	t.Helper()
	b.Stripe.SetFaults(fakestripe.Faults{StoreFailureNext: 1})
	key := apitest.NewKey()
	require.Equal(t, http.StatusBadGateway, b.PostRide(t, key, apitest.DefaultParams).Status)
	return b.KeyRow(t, key).ID
}

// ride makes a new paid ride and returns its key's id.
func (b *testBundle) ride(t *testing.T) int64 {
	t.Helper()
	key := apitest.NewKey()
	require.Equal(t, http.StatusCreated, b.PostRide(t, key, apitest.DefaultParams).Status)
	return b.KeyRow(t, key).ID
}

func (b *testBundle) rideStatus(t *testing.T, keyID int64) string {
	t.Helper()
	var s string
	require.NoError(t, b.Pool.QueryRow(context.Background(), `SELECT status FROM rides WHERE idempotency_key_id = $1`, keyID).Scan(&s))
	return s
}

func TestConsole(t *testing.T) {
	t.Parallel()

	t.Run("PagesNeedALogin", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, path := range []string{"/", "/events", "/attention", "/keys/1", "/story?q=x", "/abandoned", "/reconciliation", "/docs/failures", "/river/", "/river/api/jobs"} {
			resp, _ := b.get(t, path)
			require.Equal(t, http.StatusSeeOther, resp.StatusCode, path)
			require.True(t, strings.HasPrefix(resp.Header.Get("Location"), "/login"), path)
		}
	})

	// River UI's API changes jobs: without a login, or from another
	// origin, it is refused like the console's own actions.
	t.Run("RiverUIIsBehindTheLogin", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Equal(t, http.StatusUnauthorized, b.post(t, "/river/api/jobs/cancel", b.console.URL, nil).StatusCode)
		b.login(t)
		require.Equal(t, http.StatusForbidden, b.post(t, "/river/api/jobs/cancel", "https://evil.example", nil).StatusCode)
		resp, body := b.get(t, "/river/")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, body, "River")
	})

	// The lab is there only when configured (SIMULATED_ERRORS=true).
	t.Run("LabOnlyWithSimulatedErrors", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.login(t)
		resp, body := b.get(t, "/lab")
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		_, overview := b.get(t, "/")
		require.NotContains(t, overview, `href="/lab"`)
		require.Equal(t, http.StatusNotFound, b.post(t, "/lab", b.console.URL, url.Values{"csrf": {b.csrf(t)}, "scenario": {"race"}}).StatusCode, body)

		withLab := setupWith(t, func(s *apitest.Stack) *console.Lab {
			return &console.Lab{APIURL: s.URL, Token: s.Token, StripeBase: s.StripeURL, StripeKey: "sk_test_lab"}
		})
		withLab.login(t)
		resp, body = withLab.get(t, "/lab")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, body, `id="scenario-race"`)
		require.NotContains(t, body, withLab.Token, "never an API token")
		// A lab run is an action: the form's token is required.
		require.Equal(t, http.StatusForbidden, withLab.post(t, "/lab", withLab.console.URL, url.Values{"scenario": {"race"}}).StatusCode)
	})

	// After login the console sends the browser only to one of its own
	// pages: a next that a browser would read as another site (it drops a
	// tab, takes a backslash for a slash) goes to the overview instead.
	t.Run("LoginRedirectsOnlyWithinTheConsole", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for next, want := range map[string]string{
			"/keys/1?from=attention": "/keys/1?from=attention",
			"/story?q=a%20b":         "/story?q=a%20b",
			"/\t/x":                  "/",
			"/\t/evil.example/x":     "/",
			"/\n/x":                  "/",
			"//x":                    "/",
			"/\\x":                   "/",
			"\\\\x":                  "/",
			"/%2F/x":                 "/",
			"https://x":              "/",
			"https:x":                "/",
			"javascript:alert(1)":    "/",
			"x":                      "/",
			"":                       "/",
		} {
			resp := b.post(t, "/login", b.console.URL, url.Values{"operator": {"ada"}, "password": {password}, "next": {next}})
			require.Equal(t, http.StatusSeeOther, resp.StatusCode, "next %q", next)
			require.Equal(t, want, resp.Header.Get("Location"), "next %q", next)
			_, page := b.get(t, "/login?next="+url.QueryEscape(next))
			require.Contains(t, page, `name="next" value="`+want+`"`, "next %q", next)
		}
	})

	// Bad input gets a 4xx that says what was wrong, not a bare 404 or a
	// redirect.
	t.Run("RefusesBadInputByName", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.login(t)
		token := b.csrf(t)
		for _, id := range []string{"abc", "0", "-1", "1.5", "99999999999999999999"} {
			resp, body := b.get(t, "/keys/"+id)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, id)
			require.Contains(t, body, "key id must be a positive whole number", id)
			require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"), id)
			for _, action := range []string{"adopt", "release", "close"} {
				resp := b.post(t, "/keys/"+id+"/"+action, b.console.URL, url.Values{"csrf": {token}})
				require.Equal(t, http.StatusBadRequest, resp.StatusCode, id+"/"+action)
				body, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				require.Contains(t, string(body), "key id must be a positive whole number", id+"/"+action)
			}
		}
		resp, body := b.get(t, "/keys/987654321")
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		require.Contains(t, body, "No such key")
		require.Equal(t, http.StatusNotFound, b.post(t, "/keys/1/refund", b.console.URL, url.Values{"csrf": {token}}).StatusCode, "no such settlement")

		resp, body = b.get(t, "/story?q="+strings.Repeat("k", rides.MaxKeyLength+1))
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		require.Contains(t, body, "at most 255 characters")
		resp, body = b.get(t, "/story?q=a%40%FF")
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		require.Contains(t, body, "must be valid UTF-8")
		for _, q := range []string{"a%00", "ch_%00", "a%40b%00", "7%00"} {
			resp, body = b.get(t, "/story?q="+q)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, q)
			require.Contains(t, body, "without a NUL character", q)
		}
		resp, body = b.get(t, "/story?q="+strings.Repeat("k", rides.MaxKeyLength))
		require.Equal(t, http.StatusOK, resp.StatusCode, "the longest client key is a search")
		require.Contains(t, body, `id="none"`)

		lab := setupWith(t, func(*apitest.Stack) *console.Lab {
			return &console.Lab{APIURL: "http://127.0.0.1:1", Token: "rr_unused", StripeBase: "http://127.0.0.1:1", StripeKey: "sk_test_unused"}
		})
		lab.login(t)
		token = lab.csrf(t)
		for form, want := range map[string]string{
			"scenario=nope":                "there is no scenario &#34;nope&#34;",
			"calls=2":                      "there is no scenario &#34;&#34;",
			"scenario=stripe_down&calls=0": "N (calls) must be a whole number from 1 to 5, not &#34;0&#34;",
			"scenario=stripe_down&calls=6": "N (calls) must be a whole number from 1 to 5, not &#34;6&#34;",
			"scenario=stripe_down&calls=x": "N (calls) must be a whole number from 1 to 5, not &#34;x&#34;",
		} {
			values, err := url.ParseQuery(form)
			require.NoError(t, err)
			values.Set("csrf", token)
			resp := lab.post(t, "/lab", lab.console.URL, values)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, form)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Contains(t, string(body), want, form)
			require.Contains(t, string(body), `id="lab-form"`, "the lab's form again: %s", form)
		}
	})

	// The Stripe fake's faults are global: the lab runs one scenario at
	// a time, and leaves the fake as it found it.
	t.Run("LabRunsOneAtATimeAndClearsItsFaults", func(t *testing.T) {
		t.Parallel()
		lab := setupWith(t, func(s *apitest.Stack) *console.Lab {
			return &console.Lab{APIURL: s.URL, Token: s.Token, StripeBase: s.StripeURL, StripeKey: "sk_test_lab", Timeout: 500 * time.Millisecond}
		})
		lab.login(t)
		token := lab.csrf(t)
		resp := lab.post(t, "/lab", lab.console.URL, url.Values{"csrf": {token}, "scenario": {"race"}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		story := resp.Header.Get("Location")
		require.True(t, strings.HasPrefix(story, "/keys/"), story)

		resp = lab.post(t, "/lab", lab.console.URL, url.Values{"csrf": {token}, "scenario": {"stripe_down"}})
		require.Equal(t, http.StatusConflict, resp.StatusCode)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Contains(t, string(body), "a lab run is in progress")

		require.Eventually(t, func() bool {
			_, page := lab.get(t, story)
			return strings.Contains(page, "The lab's clients are done.")
		}, 30*time.Second, 50*time.Millisecond)
		require.Equal(t, fakestripe.Faults{}, lab.Stripe.Faults(), "the fake as the lab found it")
		resp = lab.post(t, "/lab", lab.console.URL, url.Values{"csrf": {token}, "scenario": {"dies_after_ride"}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, "the next run, once the first is done")
	})

	// A run that sets no faults clears none: the fake's faults may be
	// another client's.
	t.Run("LabLeavesFaultsItDidNotSet", func(t *testing.T) {
		t.Parallel()
		lab := setupWith(t, func(s *apitest.Stack) *console.Lab {
			return &console.Lab{APIURL: s.URL, Token: s.Token, StripeBase: s.StripeURL, StripeKey: "sk_test_lab", Timeout: 500 * time.Millisecond}
		})
		lab.login(t)
		others := fakestripe.Faults{FailStatus: http.StatusServiceUnavailable}
		lab.Stripe.SetFaults(others)
		resp := lab.post(t, "/lab", lab.console.URL, url.Values{"csrf": {lab.csrf(t)}, "scenario": {"dies_after_ride"}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		story := resp.Header.Get("Location")
		require.Eventually(t, func() bool {
			_, page := lab.get(t, story)
			return strings.Contains(page, "The lab's clients are done.")
		}, 30*time.Second, 50*time.Millisecond)
		require.Equal(t, others, lab.Stripe.Faults())
	})

	// A search finds a request by its ride, charge or user; finding
	// nothing is an answer, a failed look-up is not.
	t.Run("SearchFindsByRideChargeAndUser", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.login(t)
		keyID := b.ride(t)
		story := "/keys/" + strconv.FormatInt(keyID, 10)
		var (
			rideID int64
			charge string
		)
		require.NoError(t, b.Pool.QueryRow(context.Background(),
			`SELECT id, stripe_charge_id FROM rides WHERE idempotency_key_id = $1`, keyID).Scan(&rideID, &charge))
		for _, q := range []string{charge, b.User.Email, "#" + strconv.FormatInt(rideID, 10)} {
			resp, _ := b.get(t, "/story?q="+url.QueryEscape(q))
			require.Equal(t, http.StatusSeeOther, resp.StatusCode, q)
			require.Equal(t, story, resp.Header.Get("Location"), q)
		}
		for _, q := range []string{"ch_nothing", "nobody@example.com", "987654321", "no-such-client-key"} {
			resp, body := b.get(t, "/story?q="+url.QueryEscape(q))
			require.Equal(t, http.StatusOK, resp.StatusCode, q)
			require.Contains(t, body, `id="none"`, q)
		}

		// With the tables gone, every look-up fails: the console's 500.
		_, err := b.Pool.Exec(context.Background(), `ALTER TABLE rides RENAME TO rides_gone; ALTER TABLE users RENAME TO users_gone`)
		require.NoError(t, err)
		for _, q := range []string{"ch_nothing", "nobody@example.com", "987654321"} {
			resp, body := b.get(t, "/story?q="+url.QueryEscape(q))
			require.Equal(t, http.StatusInternalServerError, resp.StatusCode, q)
			require.NotContains(t, body, `id="none"`, q)
		}
	})

	t.Run("WrongPasswordIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp := b.post(t, "/login", b.console.URL, url.Values{"operator": {"ada"}, "password": {"guess"}})
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		require.Empty(t, resp.Cookies())
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Contains(t, string(body), `name="operator" value="ada"`, "the name stays filled in")
		require.NotContains(t, string(body), `id="operator"`, "no logged-in navigation without a login")
		require.NotContains(t, string(body), `href="/attention"`, "no logged-in navigation without a login")
		page, _ := b.get(t, "/")
		require.Equal(t, http.StatusSeeOther, page.StatusCode)
	})

	// The name goes on the audit record of every settlement: a name the
	// record would refuse is refused at the login, as bad input.
	t.Run("LoginRefusesANameTheAuditRecordWouldNot", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, name := range []string{"", "   ", strings.Repeat("a", rides.MaxOperatorLength+1), "ada\x00", "ada\nroot", "ada\u202eb", "\xff"} {
			resp := b.post(t, "/login", b.console.URL, url.Values{"operator": {name}, "password": {password}})
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, "name %q", name)
			require.Empty(t, resp.Cookies(), "name %q", name)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Contains(t, string(body), "Account name refused", "name %q", name)
			require.NotContains(t, string(body), `id="operator"`, "name %q", name)
		}
		longest := strings.Repeat("é", rides.MaxOperatorLength)
		_, err := b.operators.Add(context.Background(), longest, password)
		require.NoError(t, err, "the limit counts characters, not bytes")
		resp := b.post(t, "/login", b.console.URL, url.Values{"operator": {longest}, "password": {password}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, "the limit counts characters, not bytes")
	})

	// Served over TLS, the session cookie is Secure, and only an https
	// page of the console may post.
	t.Run("CookieIsSecureOverTLS", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tlsConsole := httptest.NewTLSServer(b.console.Config.Handler)
		t.Cleanup(tlsConsole.Close)
		client := tlsConsole.Client()
		client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		login := func(origin string) *http.Response {
			req, err := http.NewRequest(http.MethodPost, tlsConsole.URL+"/login",
				strings.NewReader(url.Values{"operator": {"ada"}, "password": {password}}.Encode()))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", origin)
			resp, err := client.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			return resp
		}
		resp := login(tlsConsole.URL)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Set-Cookie"), "; Secure")
		require.Equal(t, http.StatusForbidden, login("http://"+strings.TrimPrefix(tlsConsole.URL, "https://")).StatusCode)
	})

	// A page left open keeps its event stream: the stream ends with the
	// session, when the account is disabled.
	t.Run("EventsEndWithTheSession", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.login(t)
		resp, err := b.client.Get(b.console.URL + "/events")
		require.NoError(t, err)
		defer resp.Body.Close()
		lines := bufio.NewScanner(resp.Body)
		require.True(t, lines.Scan())
		require.Equal(t, "event: overview", lines.Text())
		_, err = b.operators.Disable(context.Background(), "ada")
		require.NoError(t, err)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for lines.Scan() {
			}
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the stream went on after the account was disabled")
		}
	})

	t.Run("OverviewCountsRides", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.login(t)
		require.Equal(t, http.StatusCreated, b.PostRide(t, apitest.NewKey(), apitest.DefaultParams).Status)
		resp, body := b.get(t, "/")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Regexp(t, `data-field="rides.succeeded">1<`, body)
		require.Regexp(t, `data-field="finished">1<`, body)
		// The test cluster has no standby, which the overview says plainly.
		require.Contains(t, body, `data-field="commits">confirmed by the primary alone (no standby)<`)
		require.Regexp(t, `(?s)data-field="points.started">0<.*data-field="points.ride_created">0<.*data-field="points.charge_created">0<`, body,
			"every unfinished recovery point, in the order a request passes them")
		require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	})

	// The key table is every endpoint's: a key at a recovery point that
	// is not the ride's is counted after the ride's, not left out.
	t.Run("OverviewCountsKeysAtAnotherEndpointsPoints", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.login(t)
		keyID := b.flag(t)
		_, err := b.Pool.Exec(context.Background(), `UPDATE idempotency_keys SET recovery_point = 'refund_created' WHERE id = $1`, keyID)
		require.NoError(t, err)
		resp, body := b.get(t, "/")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Regexp(t, `(?s)data-field="points.started">0<.*data-field="points.ride_created">0<.*data-field="points.charge_created">0<.*data-field="points.refund_created">1<`, body)
	})

	t.Run("EventsStreamTheOverview", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.login(t)
		require.Equal(t, http.StatusCreated, b.PostRide(t, apitest.NewKey(), apitest.DefaultParams).Status)
		resp, err := b.client.Get(b.console.URL + "/events")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		lines := bufio.NewScanner(resp.Body)
		require.True(t, lines.Scan())
		require.Equal(t, "event: overview", lines.Text())
		require.True(t, lines.Scan())
		require.Contains(t, lines.Text(), `"succeeded":1`)
	})

	t.Run("StoryShowsStepsAndEscapes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.login(t)
		key := `<script>alert(1)</script>`
		require.Equal(t, http.StatusCreated, b.PostRide(t, key, apitest.DefaultParams).Status)
		resp, _ := b.get(t, "/story?q="+url.QueryEscape(key))
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		id := b.KeyRow(t, key).ID
		require.Equal(t, "/keys/"+strconv.FormatInt(id, 10), resp.Header.Get("Location"))
		resp, body := b.get(t, resp.Header.Get("Location"))
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.NotContains(t, body, key)
		require.Contains(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;")
		require.Equal(t, 4, strings.Count(body, `class="step `), "claimed and three phases")
		require.Contains(t, body, "step-reached")
		require.Contains(t, body, `class="charge"`)
		require.NotContains(t, body, b.Token, "never an API token")
	})

	// The reconciler's restored rides are listed apart from its findings.
	t.Run("ReconciliationListsRestoredRides", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.login(t)
		_, err := b.Pool.Exec(context.Background(), `
			INSERT INTO reconcile_runs (since, until, charges, rides, pending, discrepancies, restored)
			VALUES (now() - interval '1 day', now(), 1, 1, 0, '[]', '[{"charge_id": "ch_restored", "ride_id": 42}]')`)
		require.NoError(t, err)
		_, body := b.get(t, "/reconciliation")
		require.Contains(t, body, `id="clean"`)
		require.Contains(t, body, `id="restored"`)
		require.Contains(t, body, `<a href="/story?q=ch_restored">ch_restored</a>`)
		require.Contains(t, body, `<a href="/story?q=42">42</a>`)
	})

	// The story says what today's code did: the Stripe key is the user's
	// and the client's key's, and only a charged ride has a receipt staged.
	t.Run("StorySentencesMatchTheCode", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.login(t)

		paid, err := b.Keys.KeyByID(context.Background(), b.ride(t))
		require.NoError(t, err)
		require.Nil(t, paid.Identity)
		_, body := b.get(t, "/keys/"+strconv.FormatInt(paid.ID, 10))
		sum := sha256.Sum256([]byte(paid.IdempotencyKey))
		stripeKey := "rocket-rides-" + strconv.FormatInt(paid.UserID, 10) + "-" + hex.EncodeToString(sum[:])
		require.Equal(t, stripeKey, rides.StripeKey(paid))
		require.Contains(t, body, `<code id="stripe-key">`+stripeKey+`</code>`)
		require.Contains(t, body, "rocket-rides-&lt;user id&gt;-&lt;SHA-256 of the client&#39;s key&gt; (here "+stripeKey+")")
		require.NotContains(t, body, "rocket-rides-&lt;key id&gt;", "the row's key")
		require.Contains(t, body, "receipt staged as a job in the same transaction")

		declinedKey := apitest.NewKey()
		resp := b.Do(t, http.MethodPost, "/rides", apitest.DefaultParams,
			"Authorization", "Bearer "+b.BadSourceToken, "Idempotency-Key", declinedKey,
			"Content-Type", "application/x-www-form-urlencoded")
		require.Equal(t, http.StatusPaymentRequired, resp.Status)
		keys, err := b.Keys.FindKeys(context.Background(), declinedKey, 1)
		require.NoError(t, err)
		require.Len(t, keys, 1)
		_, body = b.get(t, "/keys/"+strconv.FormatInt(keys[0].ID, 10))
		require.Contains(t, body, "step-reached")
		require.NotContains(t, body, "receipt staged", "a declined ride has no receipt staged")
		require.Contains(t, body, "Nothing was charged, so no receipt is staged")
		require.Contains(t, body, "only a charged ride gets a receipt")
	})

	// Stripe charges and the answer is lost on its way to the api,
	// stripe-go's own resends included: the api answers 503 with the ride
	// pending, and the client's retry hears the one charge replayed. The
	// story shows both attempts and the fake's record of what it did.
	t.Run("LabShowsTheLostAnswerAndWhatRecoveredIt", func(t *testing.T) {
		t.Parallel()
		lab := setupWith(t, func(s *apitest.Stack) *console.Lab {
			// A timeout shorter than stripe-go's resends take (at least
			// 1.25 s): the first attempt waits for the api's answer all the
			// same. Each retry must resume the key within it: a second
			// leaves a loaded machine room that half of one did not.
			return &console.Lab{APIURL: s.URL, Token: s.Token, StripeBase: s.StripeURL, StripeKey: "sk_test_lab", Timeout: time.Second}
		})
		lab.login(t)
		resp := lab.post(t, "/lab", lab.console.URL, url.Values{"csrf": {lab.csrf(t)}, "scenario": {"answer_lost"}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		story := resp.Header.Get("Location")
		require.True(t, strings.HasPrefix(story, "/keys/"), story)
		var page string
		require.Eventually(t, func() bool {
			_, page = lab.get(t, story)
			return strings.Contains(page, "The lab's clients are done.")
		}, 60*time.Second, 100*time.Millisecond)

		id, err := strconv.ParseInt(strings.TrimPrefix(story, "/keys/"), 10, 64)
		require.NoError(t, err)
		key, err := lab.Keys.KeyByID(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, idem.Finished, key.RecoveryPoint)
		require.Equal(t, http.StatusCreated, *key.ResponseCode)
		require.Len(t, lab.Stripe.Charges(), 1, "one charge at Stripe")
		require.Equal(t, fakestripe.Faults{}, lab.Stripe.Faults(), "the fake as the lab found it")

		// Attempt 1 saw the loss; a retry the charge. On a loaded machine
		// the first retry may still find the key held (409) and a later one
		// replay the answer.
		require.Regexp(t, `Attempt 1</td><td>503 payment_unavailable after`, page, "the api answered the lost answer with a 503")
		require.Regexp(t, `Attempt \d+</td><td>201`, page)
		require.Contains(t, page, "the ride is pending")
		// The fake's record: every answer of attempt 1 dropped, stripe-go's
		// resends among them, and one charge.
		m := regexp.MustCompile(`Its record of attempt 1 \(GET /_fake/stats\): (\d+) charge requests, 1 charge made, (\d+) replays?, (\d+) answers dropped`).FindStringSubmatch(page)
		require.NotNil(t, m, page)
		requests, _ := strconv.Atoi(m[1])
		replays, _ := strconv.Atoi(m[2])
		dropped, _ := strconv.Atoi(m[3])
		require.GreaterOrEqual(t, requests, 2, "stripe-go resent the charge")
		require.Equal(t, requests-1, replays)
		require.Equal(t, requests, dropped, "no answer reached the api")
		require.Regexp(t, `Its record of the retry: \d+ charge requests?, 0 charges made`, page)
		require.Contains(t, page, "Stripe replayed the charge attempt 1 had made. One ride, one charge")
		require.Contains(t, page, "same Stripe idempotency key, "+rides.StripeKey(key))
		// The key's own steps: attempt 1 unlocked it at ride_created, and
		// attempt 2 resumed there.
		require.Regexp(t, `(?s)class="step step-unlocked">.*?<td>ride_created</td>.*class="step step-resumed">`, page)
	})

	t.Run("SettlesAsTheOperator", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.login(t)
		id := b.flag(t)
		_, page := b.get(t, "/attention")
		require.Contains(t, page, `id="key-`+strconv.FormatInt(id, 10)+`"`)
		resp := b.post(t, "/keys/"+strconv.FormatInt(id, 10)+"/close", b.console.URL, url.Values{"csrf": {b.csrf(t)}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Location"), "message=")
		require.Equal(t, "failed", b.rideStatus(t, id))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE action = $1 AND data->>'operator' = 'ada'`, rides.ActionClosedFailed))
	})

	t.Run("RefusesActionsFromAnotherOrigin", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.login(t)
		id := b.flag(t)
		path := "/keys/" + strconv.FormatInt(id, 10) + "/close"
		token := b.csrf(t)
		require.Equal(t, http.StatusForbidden, b.post(t, path, "https://evil.example", url.Values{"csrf": {token}}).StatusCode)
		require.Equal(t, http.StatusForbidden, b.post(t, path, "", url.Values{"csrf": {token}}).StatusCode, "neither Origin nor Referer")
		require.Equal(t, http.StatusForbidden, b.post(t, path, b.console.URL, url.Values{"csrf": {"forged"}}).StatusCode)
		require.Equal(t, http.StatusForbidden, b.post(t, path, b.console.URL, nil).StatusCode)
		require.Equal(t, "needs_review", b.rideStatus(t, id))
	})

	t.Run("RefusesActionsWithoutLogin", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.flag(t)
		resp := b.post(t, "/keys/"+strconv.FormatInt(id, 10)+"/release", b.console.URL, url.Values{"csrf": {"x"}})
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		require.Equal(t, "needs_review", b.rideStatus(t, id))
	})

	// The refusals of rides and idem go back to the page, in words.
	t.Run("RefusesWhatCannotBeSettled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.login(t)
		keyID := b.ride(t)
		finished := strconv.FormatInt(keyID, 10)
		for path, want := range map[string]string{
			"/keys/" + finished + "/close": "this request has finished",
			"/keys/987654321/release":      "no such key",
		} {
			resp := b.post(t, path, b.console.URL, url.Values{"csrf": {b.csrf(t)}})
			require.Equal(t, http.StatusSeeOther, resp.StatusCode, path)
			location, err := resp.Location()
			require.NoError(t, err, path)
			require.Contains(t, location.Query().Get("error"), want, path)
		}
	})

	// Any other error is the console's own failure: a 500, its text in
	// the log, not on the operator's page as if it were a refusal.
	t.Run("AnUnexpectedSettlementErrorIsA500", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.login(t)
		id := b.flag(t)
		// A key at ride_created without its ride: a bug, not a refusal.
		_, err := b.Pool.Exec(context.Background(), `DELETE FROM rides WHERE idempotency_key_id = $1`, id)
		require.NoError(t, err)
		resp := b.post(t, "/keys/"+strconv.FormatInt(id, 10)+"/close", b.console.URL, url.Values{"csrf": {b.csrf(t)}})
		require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
		require.Empty(t, resp.Header.Get("Location"))
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NotContains(t, string(body), "without a ride", "the error's text stays in the log")
	})

	t.Run("RefusesWhileAnotherHoldsTheKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.login(t)
		id := b.flag(t)
		_, err := b.Keys.ClaimByID(context.Background(), id, nil)
		require.NoError(t, err)
		resp := b.post(t, "/keys/"+strconv.FormatInt(id, 10)+"/release", b.console.URL, url.Values{"csrf": {b.csrf(t)}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Location"), "error=")
		_, page := b.get(t, resp.Header.Get("Location"))
		require.Contains(t, page, "another request holds this key")
		require.Equal(t, "needs_review", b.rideStatus(t, id))
	})
}
