package console

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	"github.com/rocketrides/rocketrides/internal/operator"
	"github.com/rocketrides/rocketrides/internal/rides"
)

// The console's door: the login to a person's account, the session that
// every page and action needs (package operator keeps both), and the
// checks every POST passes: its origin, scheme included, and the
// session's form token.

// session is an operator logged in, as package operator keeps it.
type session = operator.Session

// csrf is the session's token for forms: a signature by the session's own
// key, kept on the server with the session, so that a page of another
// session cannot forge it and it ends with the session.
func csrf(s *session) string { return s.Sign("csrf") }

const cookieName = "rocketrides_console"

// sessionOf returns the request's session, or nil when its cookie names
// none that is on (package operator: not expired, not logged out, its
// account enabled). The error is the database's.
func (c *Console) sessionOf(r *http.Request) (*session, error) {
	cookie, err := r.Cookie(cookieName)
	if err != nil {
		return nil, nil
	}
	s, err := c.operators.Session(r.Context(), cookie.Value)
	if errors.Is(err, operator.ErrNoSession) {
		return nil, nil
	}
	return s, err
}

// page requires a session for a page that only reads.
func (c *Console) page(fn func(w http.ResponseWriter, r *http.Request, s *session)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := c.sessionOf(r)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		if s == nil {
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		fn(w, r, s)
	})
}

// action requires, for a POST, a session, a request from the console's
// own origin, and the session's form token: a page on another site can
// make the browser send the cookie, but it can neither set Origin to ours
// nor read the token.
func (c *Console) action(fn func(w http.ResponseWriter, r *http.Request, s *session)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := c.sessionOf(r)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		if s == nil {
			http.Error(w, "Log in first.", http.StatusUnauthorized)
			return
		}
		if !c.sameOrigin(r) {
			c.logger.WarnContext(r.Context(), "Refused a console action from another origin",
				slog.String("origin", r.Header.Get("Origin")), slog.String("referer", r.Header.Get("Referer")))
			http.Error(w, "Refused: the request did not come from this console.", http.StatusForbidden)
			return
		}
		if token := r.PostFormValue("csrf"); subtle.ConstantTimeCompare([]byte(token), []byte(csrf(s))) != 1 {
			http.Error(w, "Refused: the form's token is missing or stale; reload the page.", http.StatusForbidden)
			return
		}
		fn(w, r, s)
	})
}

// scheme is the scheme the browser reached the console by: https over
// TLS, or when a proxy the console trusts (Config.TrustProxy) says so in
// X-Forwarded-Proto (its first value: the proxy nearest the browser
// writes it first); http otherwise.
func (c *Console) scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	if c.trustProxy {
		proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
		if strings.EqualFold(strings.TrimSpace(proto), "https") {
			return "https"
		}
	}
	return "http"
}

// sameOrigin reports whether r comes from a page of this console: its
// Origin header is exactly the scheme and host r was sent to (no
// userinfo, path or anything else: http://evil@host is another origin),
// or, without one, its Referer has that scheme and host and no userinfo.
// A POST with neither is refused, and so is one from the console's host
// under the other scheme: a page served over plain http (which anyone on
// the path may rewrite) is not the https console's. The host itself is
// one the console serves (Config.Hosts), or the request was refused
// before this.
func (c *Console) sameOrigin(r *http.Request) bool {
	want := c.scheme(r) + "://" + r.Host
	if origin := r.Header.Get("Origin"); origin != "" && origin != "null" {
		return strings.EqualFold(origin, want)
	}
	u, err := url.Parse(r.Header.Get("Referer"))
	return err == nil && u.User == nil && strings.EqualFold(u.Scheme+"://"+u.Host, want)
}

// setCookie sets the session cookie, Secure when the browser reached the
// console over https (scheme): a browser then never sends it in the clear.
func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, cookie *http.Cookie) {
	cookie.Name, cookie.Path = cookieName, "/"
	cookie.HttpOnly, cookie.SameSite = true, http.SameSiteStrictMode
	cookie.Secure = c.scheme(r) == "https"
	http.SetCookie(w, cookie)
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "login", nil, map[string]any{"Next": safeNext(r.URL.Query().Get("next"))})
}

// login checks the account's password (package operator: argon2id,
// throttled per account and per address) and starts a session kept on the
// server, under the account's name, which every settlement's audit record
// carries. Every refusal is logged with the address it came from. Login
// is a POST like any other: it too must come from the console's own
// origin.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimSpace(r.PostFormValue("operator"))
	password := r.PostFormValue("password")
	next := safeNext(r.PostFormValue("next"))
	// The form again, its name filled in. Not under "Operator": the
	// layout shows the logged-in navigation to a page that has one.
	refuse := func(status int, msg string) {
		c.renderStatus(w, r, status, "login", nil, map[string]any{"Next": next, "Error": msg, "Name": name})
	}
	if !c.sameOrigin(r) {
		http.Error(w, "Refused: the request did not come from this console.", http.StatusForbidden)
		return
	}
	ctx := r.Context()
	from := c.clientIP(r)
	// The name goes on the audit record of every settlement, which
	// refuses one rides.ValidOperator refuses: no account has one.
	var refused *rides.OperatorError
	if errors.As(rides.ValidOperator(name), &refused) {
		c.logger.WarnContext(ctx, "Console login refused", slog.String("operator", name),
			slog.String("address", from.String()), slog.String("reason", refused.Reason))
		refuse(http.StatusBadRequest, fmt.Sprintf("Account name refused: %s. No account can have it: it would go on the audit record of what you do.", refused.Reason))
		return
	}
	s, token, err := c.operators.Login(ctx, name, password, from)
	var throttled *operator.ThrottledError
	switch {
	case errors.As(err, &throttled):
		wait := int(math.Ceil(throttled.RetryAfter.Seconds()))
		c.logger.WarnContext(ctx, "Console login throttled", slog.String("operator", name),
			slog.String("address", from.String()), slog.String("scope", throttled.Scope), slog.Int("retry_after_seconds", wait))
		w.Header().Set("Retry-After", strconv.Itoa(wait))
		refuse(http.StatusTooManyRequests, fmt.Sprintf("Too many failed logins; try again in %d seconds.", wait))
		return
	case errors.Is(err, operator.ErrRefused):
		// Which of name, password or account was wrong is for the log,
		// not for whoever is guessing.
		c.logger.WarnContext(ctx, "Console login refused", slog.String("operator", name),
			slog.String("address", from.String()), slog.String("reason", err.Error()))
		refuse(http.StatusUnauthorized, "Wrong name or password.")
		return
	case err != nil:
		c.fail(w, r, err)
		return
	}
	c.setCookie(w, r, &http.Cookie{Value: token, Expires: s.Expires})
	c.logger.InfoContext(ctx, "Console login", slog.String("operator", s.Operator), slog.String("address", from.String()))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout ends the session on the server, not only in this browser: its
// cookie, copied anywhere, logs no one in again.
func (c *Console) logout(w http.ResponseWriter, r *http.Request, s *session) {
	if cookie, err := r.Cookie(cookieName); err == nil {
		if err := c.operators.Logout(r.Context(), cookie.Value); err != nil {
			c.fail(w, r, err)
			return
		}
	}
	c.logger.InfoContext(r.Context(), "Console logout", slog.String("operator", s.Operator))
	c.setCookie(w, r, &http.Cookie{Value: "", MaxAge: -1})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// safeNext keeps a redirect after login on this console: it returns
// next's path and query when next is a path of this console, else "/".
// Browsers read a URL more loosely than net/url does: they drop tabs and
// newlines anywhere and take a backslash for a slash, so "/\t/evil.example"
// and "/\\evil.example" reach them as "//evil.example", another site. Any
// control character or backslash is refused outright, before parsing.
func safeNext(next string) string {
	if strings.ContainsFunc(next, func(r rune) bool { return r == '\\' || unicode.IsControl(r) }) {
		return "/"
	}
	// A path of exactly one leading slash parses to no scheme, host,
	// user or opaque part; its decoded path may still begin "//"
	// ("/%2F/x"), refused too: decoded anywhere on its way, it names
	// another site.
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || strings.HasPrefix(u.Path, "//") {
		return "/"
	}
	return (&url.URL{Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery}).RequestURI()
}
