package console_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// operatorClient is a browser of the console process, logged in: its
// cookies kept, redirects not followed.
type operatorClient struct {
	base   string
	client *http.Client
}

func loginTo(t *testing.T, s *procStack) *operatorClient {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &operatorClient{base: s.console.URL,
		client: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	resp := c.post(t, "/login", url.Values{"operator": {"ada"}, "password": {password}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	return c
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
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", c.base)
	resp, err := c.client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp
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
