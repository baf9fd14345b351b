package console_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet/fleettest"
)

// operatorClient is a browser of the console process, logged in: its
// cookies kept, redirects not followed.
type operatorClient struct {
	base   string
	client *http.Client
}

func loginTo(t *testing.T, s *procStack) *operatorClient {
	t.Helper()
	c := newClient(t, s.console.URL, "")
	resp := c.post(t, "/login", url.Values{"operator": {"ada"}, "password": {password}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	return c
}

// newClient is a browser of the console at base, not logged in, its
// requests sent from the loopback address from ("": the default): all of
// 127/8 is this host's, so each test can be a client address of its own.
func newClient(t *testing.T, base, from string) *operatorClient {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if from != "" {
		dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		transport.DialContext = dialer.DialContext
	}
	t.Cleanup(transport.CloseIdleConnections)
	return &operatorClient{base: base, client: &http.Client{Jar: jar, Transport: transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (c *operatorClient) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := c.client.Get(c.base + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func (c *operatorClient) post(t *testing.T, path string, form url.Values) *http.Response {
	t.Helper()
	return c.postWith(t, path, form, "Origin", c.base)
}

// postWith posts form with headers (name, value pairs).
func (c *operatorClient) postWith(t *testing.T, path string, form url.Values, headers ...string) *http.Response {
	t.Helper()
	return c.as(t, "", http.MethodPost, path, form, headers...)
}

// as sends a request to the console's address with Host set to host ("":
// the address's own), as a browser does for a page of that name, and
// form as its body, with headers (name, value pairs).
func (c *operatorClient) as(t *testing.T, host, method, path string, form url.Values, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	if host != "" {
		req.Host = host
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp
}

// cookie is the value of the client's session cookie.
func (c *operatorClient) cookie(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(c.base)
	require.NoError(t, err)
	for _, k := range c.client.Jar.Cookies(u) {
		if k.Name == "rocketrides_console" {
			return k.Value
		}
	}
	t.Fatal("no session cookie")
	return ""
}

// withCookie is a new client that sends value as its session cookie, as
// someone who copied it would.
func withCookie(t *testing.T, base, value string) *operatorClient {
	t.Helper()
	c := newClient(t, base, "")
	u, err := url.Parse(base)
	require.NoError(t, err)
	c.client.Jar.SetCookies(u, []*http.Cookie{{Name: "rocketrides_console", Value: value, Path: "/"}})
	return c
}

// csrf is the form token of the client's session, from a page.
func (c *operatorClient) csrf(t *testing.T) string {
	t.Helper()
	status, page := c.get(t, "/attention")
	require.Equal(t, http.StatusOK, status)
	m := csrfField.FindStringSubmatch(page)
	require.NotNil(t, m, page)
	return m[1]
}

// TestConsoleProcessEdge goes through the console process, as make dev
// runs it.
func TestConsoleProcessEdge(t *testing.T) {
	t.Parallel()
	s := startStack(t, false, "MAX_CHARGE_ATTEMPTS=1")

	// /static/ and /river/assets/ used to list what they hold.
	t.Run("ListsNoDirectory", func(t *testing.T) {
		c := loginTo(t, s)
		for _, path := range []string{"/static/", "/river/assets/", "/river/.vite/"} {
			status, body := c.get(t, path)
			require.Equal(t, http.StatusNotFound, status, "%s: %s", path, body)
			require.NotContains(t, body, "<a href=", path)
		}
		status, _ := c.get(t, "/static/console.css")
		require.Equal(t, http.StatusOK, status, "the files themselves are served")
		status, _ = c.get(t, "/river/")
		require.Equal(t, http.StatusOK, status, "River UI's page is served")
	})

	// /attention?message=... used to show any text as the console's own
	// word of success.
	t.Run("ShowsOnlyMessagesItSetItself", func(t *testing.T) {
		c := loginTo(t, s)
		forged := "Refunded in full. Call 555-0100 to confirm your password."
		for _, path := range []string{
			"/attention?message=" + url.QueryEscape(forged),
			"/attention?error=" + url.QueryEscape(forged),
			"/attention?message=" + url.QueryEscape(forged) + "&sig=forged",
		} {
			status, body := c.get(t, path)
			require.Equal(t, http.StatusOK, status, path)
			require.NotContains(t, body, "Call 555-0100", path)
		}

		// What the console says after a settlement, it shows, to the
		// session it said it to.
		id := s.flag(t)
		_, page := c.get(t, "/attention")
		m := csrfField.FindStringSubmatch(page)
		require.NotNil(t, m, page)
		resp := c.post(t, "/keys/"+strconv.FormatInt(id, 10)+"/close", url.Values{"csrf": {m[1]}, "from": {"attention"}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		location := resp.Header.Get("Location")
		_, page = c.get(t, location)
		require.Contains(t, page, "Closed as failed")
		_, page = loginTo(t, s).get(t, location)
		require.NotContains(t, page, "Closed as failed", "another session's link shows nothing")
	})
}

// TestConsoleProcessAccounts goes through the console process, as make
// dev runs it: people log in to accounts made with `console operator`,
// sessions are kept on the server, and logins are throttled. Each case
// has accounts and client addresses of its own.
func TestConsoleProcessAccounts(t *testing.T) {
	t.Parallel()
	// A first wait of 1s, the default, would let a guess sent more than a
	// second after the fifth through on a slow machine: the throttle's
	// tests would time the machine.
	s := startStack(t, false, "MAX_CHARGE_ATTEMPTS=1", "CONSOLE_LOGIN_FIRST_WAIT=5s")
	host := strings.TrimPrefix(s.console.URL, "http://")
	consoleLog := func(t *testing.T, msg, address string) int {
		t.Helper()
		n := 0
		for line := range strings.Lines(s.console.Log()) {
			if strings.Contains(line, `msg="`+msg+`"`) && strings.Contains(line, " address="+address+" ") {
				n++
			}
		}
		return n
	}

	// The login used to take any name with the shared password, and the
	// audit records named whoever someone claimed to be.
	t.Run("LoginNeedsAnAccountAndTheAuditNamesIt", func(t *testing.T) {
		c := newClient(t, s.console.URL, "127.0.0.11")
		resp := c.post(t, "/login", url.Values{"operator": {"mallory"}, "password": {password}})
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a name without an account, with ada's password")
		require.Empty(t, resp.Cookies())
		require.Equal(t, 1, consoleLog(t, "Console login refused", "127.0.0.11"), "the failure is logged with its address")

		resp = c.post(t, "/login", url.Values{"operator": {"ada"}, "password": {password}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		id := s.flag(t)
		resp = c.post(t, "/keys/"+strconv.FormatInt(id, 10)+"/close", url.Values{"csrf": {c.csrf(t)}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		var operator string
		require.NoError(t, s.pool.QueryRow(context.Background(),
			`SELECT data->>'operator' FROM audit_records WHERE data->>'operator' IS NOT NULL ORDER BY id DESC LIMIT 1`).Scan(&operator))
		require.Equal(t, "ada", operator)
	})

	// Logging out used to clear only the browser's copy: the cookie
	// worked for 12 h, across restarts.
	t.Run("LogoutEndsTheSessionOnTheServer", func(t *testing.T) {
		c := newClient(t, s.console.URL, "127.0.0.12")
		require.Equal(t, http.StatusSeeOther, c.post(t, "/login", url.Values{"operator": {"ada"}, "password": {password}}).StatusCode)
		copied := c.cookie(t)
		token := c.csrf(t)
		status, _ := withCookie(t, s.console.URL, copied).get(t, "/attention")
		require.Equal(t, http.StatusOK, status, "the copy works while the session is on")

		require.Equal(t, http.StatusSeeOther, c.post(t, "/logout", url.Values{"csrf": {token}}).StatusCode)
		replay := withCookie(t, s.console.URL, copied)
		status, _ = replay.get(t, "/attention")
		require.Equal(t, http.StatusSeeOther, status, "logged out everywhere")
		require.Equal(t, http.StatusUnauthorized, replay.post(t, "/keys/1/close", url.Values{"csrf": {token}}).StatusCode)

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, s.console.Restart(ctx))
		status, _ = replay.get(t, "/attention")
		require.Equal(t, http.StatusSeeOther, status, "and after a restart")
		status, _ = loginTo(t, s).get(t, "/attention")
		require.Equal(t, http.StatusOK, status, "a new login works after the restart")
	})

	t.Run("DisablingTheAccountEndsItsSessions", func(t *testing.T) {
		s.operator(t, "grace's long password\n", 0, "add", "grace")
		c := newClient(t, s.console.URL, "127.0.0.13")
		require.Equal(t, http.StatusSeeOther, c.post(t, "/login", url.Values{"operator": {"grace"}, "password": {"grace's long password"}}).StatusCode)
		status, _ := c.get(t, "/attention")
		require.Equal(t, http.StatusOK, status)

		stdout, _ := s.operator(t, "", 0, "disable", "grace")
		require.Contains(t, stdout, "1 sessions ended")
		status, _ = c.get(t, "/attention")
		require.Equal(t, http.StatusSeeOther, status, "logged out at the next request")
		require.Equal(t, http.StatusUnauthorized,
			c.post(t, "/login", url.Values{"operator": {"grace"}, "password": {"grace's long password"}}).StatusCode)
		_, stderr := s.operator(t, "", 1, "disable", "nobody")
		require.Contains(t, stderr, "no such account")
	})

	// 1,300 wrong passwords used to go through at 3,900 a second.
	t.Run("ThrottlesLoginsPerAddressAndPerAccount", func(t *testing.T) {
		// Per address: five names guessed, then the address waits, even
		// for a right password.
		c := newClient(t, s.console.URL, "127.0.0.21")
		for _, name := range []string{"root", "admin", "operator", "test", "ada"} {
			require.Equal(t, http.StatusUnauthorized, c.post(t, "/login", url.Values{"operator": {name}, "password": {"guess"}}).StatusCode, name)
		}
		resp := c.post(t, "/login", url.Values{"operator": {"ada"}, "password": {password}})
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		wait, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		require.NoError(t, err, "Retry-After in seconds")
		require.Positive(t, wait)
		require.Empty(t, resp.Cookies())
		require.Equal(t, 6, consoleLog(t, "Console login refused", "127.0.0.21")+consoleLog(t, "Console login throttled", "127.0.0.21"),
			"every failure logged with the address")
		require.Equal(t, 1, consoleLog(t, "Console login throttled", "127.0.0.21"))
		status, _ := loginTo(t, s).get(t, "/")
		require.Equal(t, http.StatusOK, status, "another address logs in")

		// Per account: five guesses at one account, each from another
		// address, then the account waits, from any address.
		s.operator(t, "linus's long password\n", 0, "add", "linus")
		for i := range 5 {
			from := newClient(t, s.console.URL, "127.0.0.3"+strconv.Itoa(i))
			require.Equal(t, http.StatusUnauthorized, from.post(t, "/login", url.Values{"operator": {"linus"}, "password": {"guess"}}).StatusCode)
		}
		owner := newClient(t, s.console.URL, "127.0.0.39")
		resp = owner.post(t, "/login", url.Values{"operator": {"linus"}, "password": {"linus's long password"}})
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		wait, err = strconv.Atoi(resp.Header.Get("Retry-After"))
		require.NoError(t, err)
		require.Positive(t, wait)
		time.Sleep(time.Duration(wait) * time.Second)
		resp = owner.post(t, "/login", url.Values{"operator": {"linus"}, "password": {"linus's long password"}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, "after the wait")
	})

	// An https:// Origin used to pass against the http:// console.
	t.Run("OriginMustHaveTheConsolesScheme", func(t *testing.T) {
		c := newClient(t, s.console.URL, "127.0.0.14")
		form := url.Values{"operator": {"ada"}, "password": {password}}
		require.Equal(t, http.StatusForbidden, c.postWith(t, "/login", form, "Origin", "https://"+host).StatusCode)
		require.Equal(t, http.StatusForbidden, c.postWith(t, "/login", form, "Referer", "https://"+host+"/login").StatusCode)
		require.Equal(t, http.StatusSeeOther, c.post(t, "/login", form).StatusCode)

		id := s.flag(t)
		path := "/keys/" + strconv.FormatInt(id, 10) + "/close"
		token := c.csrf(t)
		require.Equal(t, http.StatusForbidden, c.postWith(t, path, url.Values{"csrf": {token}}, "Origin", "https://"+host).StatusCode)
		require.Equal(t, "needs_review", s.rideStatus(t, id))
	})

	// The console used to answer any Host and compare Origin with it, so
	// a page of rebind.evil.example, its name resolved to 127.0.0.1, could
	// log in with make dev's account, read /attention and post to /lab.
	// And Origin: http://evil@host passed, userinfo and all.
	t.Run("AnswersOnlyToItsOwnName", func(t *testing.T) {
		// The lab is on, and a proxy serves the console by a name.
		p := fleettest.Start(t, s.fleet, "console", "SIMULATED_ERRORS=true", "CONSOLE_HOSTS=console.example.test")
		port := p.URL[strings.LastIndex(p.URL, ":")+1:]
		form := url.Values{"operator": {"ada"}, "password": {password}}
		c := newClient(t, p.URL, "127.0.0.18")
		as := func(host, method, path string, form url.Values, headers ...string) *http.Response {
			t.Helper()
			return c.as(t, host, method, path, form, headers...)
		}
		rebind := "rebind.evil.example:" + port
		resp := as(rebind, http.MethodPost, "/login", form, "Origin", "http://"+rebind)
		require.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode, "the login")
		require.Empty(t, resp.Cookies())
		require.Equal(t, http.StatusSeeOther, c.post(t, "/login", form).StatusCode, "by its own address")
		token := c.csrf(t)
		require.Equal(t, http.StatusMisdirectedRequest, as(rebind, http.MethodGet, "/attention", nil).StatusCode, "a page")
		require.Equal(t, http.StatusMisdirectedRequest,
			as(rebind, http.MethodPost, "/lab", url.Values{"csrf": {token}, "scenario": {"stripe_down"}}, "Origin", "http://"+rebind).StatusCode, "the lab")
		require.Contains(t, p.Log(), `msg="Refused a console request for another host" process=console host=`+rebind)

		// Exactly scheme://host:port, and nothing else.
		for _, origin := range []string{"http://evil@" + strings.TrimPrefix(p.URL, "http://"), p.URL + "/", p.URL + "/login", p.URL + ":80"} {
			require.Equal(t, http.StatusForbidden, c.postWith(t, "/logout", url.Values{"csrf": {token}}, "Origin", origin).StatusCode, origin)
		}
		require.Equal(t, http.StatusForbidden,
			c.postWith(t, "/logout", url.Values{"csrf": {token}}, "Referer", "http://evil@"+strings.TrimPrefix(p.URL, "http://")+"/attention").StatusCode)

		// Its names: localhost on its port, and the proxy's.
		for _, host := range []string{"localhost:" + port, "console.example.test", "Console.Example.Test:443"} {
			resp := as(host, http.MethodPost, "/login", form, "Origin", "http://"+host)
			require.Equal(t, http.StatusSeeOther, resp.StatusCode, host)
		}
		require.Equal(t, http.StatusMisdirectedRequest, as("localhost:1", http.MethodGet, "/login", nil).StatusCode, "another port")
	})

	// X-Forwarded-Proto is believed only with CONSOLE_TRUST_PROXY=true:
	// then https there makes the cookie Secure and is the scheme an
	// Origin must have.
	t.Run("CookieIsSecureBehindATrustedProxy", func(t *testing.T) {
		form := url.Values{"operator": {"ada"}, "password": {password}}
		direct := newClient(t, s.console.URL, "127.0.0.15")
		resp := direct.postWith(t, "/login", form, "Origin", s.console.URL, "X-Forwarded-Proto", "https")
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, "the header is not believed")
		require.NotContains(t, resp.Header.Get("Set-Cookie"), "Secure")
		require.Equal(t, http.StatusForbidden,
			direct.postWith(t, "/login", form, "Origin", "https://"+host, "X-Forwarded-Proto", "https").StatusCode)

		proxied := fleettest.Start(t, s.fleet, "console", "CONSOLE_TRUST_PROXY=true")
		proxiedHost := strings.TrimPrefix(proxied.URL, "http://")
		c := newClient(t, proxied.URL, "127.0.0.16")
		resp = c.postWith(t, "/login", form, "Origin", "https://"+proxiedHost, "X-Forwarded-Proto", "https")
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Set-Cookie"), "; Secure")
		require.Contains(t, resp.Header.Get("Set-Cookie"), "HttpOnly")
		require.Equal(t, http.StatusForbidden,
			c.postWith(t, "/login", form, "Origin", "http://"+proxiedHost, "X-Forwarded-Proto", "https").StatusCode,
			"an http page is not the https console's")
		resp = c.postWith(t, "/login", form, "Origin", "http://"+proxiedHost, "X-Forwarded-Proto", "http")
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, "plain http through the proxy")
		require.NotContains(t, resp.Header.Get("Set-Cookie"), "Secure")
	})

	// Behind the proxy every login came from the proxy's address, so five
	// wrong guesses by anyone made every operator wait.
	t.Run("ThrottlesTheForwardedAddressBehindATrustedProxy", func(t *testing.T) {
		proxied := fleettest.Start(t, s.fleet, "console", "CONSOLE_TRUST_PROXY=true")
		c := newClient(t, proxied.URL, "127.0.0.17") // the proxy
		guess := func(name, forwardedFor string) *http.Response {
			return c.postWith(t, "/login", url.Values{"operator": {name}, "password": {"guess"}},
				"Origin", proxied.URL, "X-Forwarded-For", forwardedFor)
		}
		// The client wrote the first address; the proxy appended the last.
		for _, name := range []string{"root", "admin", "operator", "test", "ada"} {
			require.Equal(t, http.StatusUnauthorized, guess(name, "198.51.100.7, 203.0.113.1").StatusCode, name)
		}
		require.Equal(t, http.StatusTooManyRequests, guess("ada", "198.51.100.8, 203.0.113.1").StatusCode,
			"the forwarded address waits, whatever the client wrote before it")
		resp := c.postWith(t, "/login", url.Values{"operator": {"ada"}, "password": {password}},
			"Origin", proxied.URL, "X-Forwarded-For", "203.0.113.1, 203.0.113.2")
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, "another operator behind the same proxy logs in")

		lines := 0
		for line := range strings.Lines(proxied.Log()) {
			if strings.Contains(line, `msg="Console login refused"`) {
				require.Contains(t, line, " address=203.0.113.1 ")
				lines++
			}
		}
		require.Equal(t, 5, lines, "every failure logged with the client's address")
	})

	// CONSOLE_PASSWORD=a, or whitespace, used to start the console.
	t.Run("OperatorAddRefusesAWeakPasswordByName", func(t *testing.T) {
		for stdin, want := range map[string]string{
			"a\n":                  "the password has 1 characters, at least 12",
			"            \n":       "the password is blank",
			" \t \t \t \t \t \t\n": "the password is blank",
			"aaaaaaaaaaaa\n":       "the password is one character repeated",
			"eleven char\n":        "the password has 11 characters, at least 12",
			"weakling.account\n":   "the password is the account's name",
			"":                     "no password on standard input",
		} {
			_, stderr := s.operator(t, stdin, 2, "add", "weakling.account")
			require.Contains(t, stderr, want, "%q", stdin)
		}
		_, stderr := s.operator(t, password+"\n", 2, "add", " spaced ")
		require.Contains(t, stderr, "begins or ends with a space")
		var n int
		require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT count(*) FROM operators WHERE name LIKE '%weakling%'`).Scan(&n))
		require.Zero(t, n, "nothing stored")

		_, stderr = s.operator(t, "another long password\n", 1, "add", "ada")
		require.Contains(t, stderr, "exists (-reset sets its password)")
	})
}

// TestConsoleProcessHasNoDefaultAccount: outside make dev there is no
// account to log in to until someone adds one, and the console says so.
func TestConsoleProcessHasNoDefaultAccount(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t, "DATABASE_URL="+dbtest.NewURL(t), "STRIPE_API_KEY="+stripeKey)
	p := fleettest.Start(t, f, "console")
	c := newClient(t, p.URL, "")
	for _, login := range [][2]string{{"admin", "admin"}, {"admin", "rocketrides-dev"}, {"operator", "rocketrides-dev"}, {"dev", "rocketrides-dev"}} {
		require.Equal(t, http.StatusUnauthorized, c.post(t, "/login", url.Values{"operator": {login[0]}, "password": {login[1]}}).StatusCode, "%v", login)
	}
	require.Contains(t, p.Log(), "No operator account can log in; add one with: console operator add NAME")
}
