// Package console is the operator's console: a server-rendered web UI
// over the same Postgres the api writes, acting only through the
// project's own packages (idem, rides, payment, reconcile), so every rule
// the api keeps holds here too.
//
//   - The overview counts keys by recovery point and lock state, rides by
//     status, staged and River jobs, the reconciler's latest findings and
//     new rides per second, live over server-sent events.
//   - A request's story: its key, every step it took (idem's steps), its
//     ride, its charge as Stripe reports it, its audit records, its
//     receipt.
//   - Needs attention: the keys set aside for a person, with what Stripe
//     holds for each, and the three settlements of package rides.
//   - The reaper's abandoned requests and the reconciler's findings.
//
// It is an operator tool over payment data: every page needs a login
// (a password from the environment), every POST is checked against the
// console's own origin and a per-session token, templates escape
// everything, and API tokens are never read, let alone shown.
package console

import (
	"cmp"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5/pgxpool"
	"riverqueue.com/riverui"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/rides"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// sessionLifetime is how long a login lasts.
const sessionLifetime = 12 * time.Hour

// Config configures the console.
type Config struct {
	// Pool is the Rocket Rides database. Required.
	Pool *pgxpool.Pool
	// Keys is the idempotency-key store, its Actor "console". Required.
	Keys *idem.Store
	// Rides settles keys set aside and asks Stripe about a request.
	// Required.
	Rides *rides.Service
	// Password is the login secret (CONSOLE_PASSWORD). Required; it also
	// keys the signatures of sessions, so changing it logs everyone out.
	Password string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Lab, when set, adds the lab (only where simulated errors are
	// enabled, as in make dev). Nil leaves it out: no page, no route.
	Lab *Lab
}

func (c *Config) validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("console: Config.Pool is required")
	case c.Keys == nil:
		return errors.New("console: Config.Keys is required")
	case c.Rides == nil:
		return errors.New("console: Config.Rides is required")
	case c.Password == "":
		return errors.New("console: Config.Password is required")
	}
	if c.Lab != nil {
		return c.Lab.validate()
	}
	return nil
}

// Console is the console's HTTP handler.
type Console struct {
	pool     *pgxpool.Pool
	keys     *idem.Store
	rides    *rides.Service
	password string
	secret   []byte
	logger   *slog.Logger
	pages    map[string]*template.Template
	mux      *http.ServeMux
	// failuresHTML is docs/failures.md, rendered once.
	failuresHTML template.HTML
	lab          *Lab
	labRuns      labRuns
	labRunning   atomic.Bool
	labClient    *http.Client
	river        *riverui.Handler
}

// New returns the console for config.
func New(config *Config) (*Console, error) {
	if config == nil {
		return nil, errors.New("console: Config is required")
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	secret := sha256.Sum256([]byte("rocketrides console session\x00" + config.Password))
	c := &Console{
		pool:     config.Pool,
		keys:     config.Keys,
		rides:    config.Rides,
		password: config.Password,
		secret:   secret[:],
		logger:   cmp.Or(config.Logger, slog.Default()),
		pages:    map[string]*template.Template{},
	}
	if err := c.parseTemplates(); err != nil {
		return nil, err
	}
	var err error
	if c.failuresHTML, err = renderFailures(); err != nil {
		return nil, err
	}
	if config.Lab != nil {
		c.lab = labDefaults(config.Lab)
		c.labClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	}
	if c.river, err = newRiverUI(c.pool, c.logger); err != nil {
		return nil, err
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /static/", noListing(http.StripPrefix("/static/", http.FileServerFS(static))))
	mux.HandleFunc("GET /login", c.loginPage)
	mux.HandleFunc("POST /login", c.login)
	mux.Handle("POST /logout", c.action(c.logout))
	mux.Handle("GET /{$}", c.page(c.overview))
	mux.Handle("GET /events", c.page(c.events))
	mux.Handle("GET /story", c.page(c.search))
	mux.Handle("GET /keys/{id}", c.page(c.story))
	mux.Handle("GET /attention", c.page(c.attention))
	for _, a := range settlements {
		mux.Handle("POST /keys/{id}/"+a.Name, c.action(c.settle(a)))
	}
	mux.Handle("GET /abandoned", c.page(c.abandoned))
	mux.Handle("GET /reconciliation", c.page(c.reconciliation))
	mux.Handle("GET /docs/failures", c.page(c.failures))
	if c.lab != nil {
		mux.Handle("GET /lab", c.page(c.labPage))
		mux.Handle("POST /lab", c.action(c.labStart))
	}
	mux.Handle("/river/", c.riverPage(c.river))
	mux.Handle("GET /river", http.RedirectHandler("/river/", http.StatusMovedPermanently))
	c.mux = mux
	return c, nil
}

// ServeHTTP serves the console, with headers that keep its pages out of
// frames, caches and other sites' scripts.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	if strings.HasPrefix(r.URL.Path, "/river/") {
		// River UI's own page runs its bundled scripts and styles its
		// own way; it still may not be framed.
		h.Set("Content-Security-Policy", "frame-ancestors 'none'")
	} else {
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
	}
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	c.mux.ServeHTTP(w, r)
}

// noListing answers 404 to the path of a directory, which a file server
// would list: what a directory holds is for no one to browse.
func noListing(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// flash is the address of the page back, showing text as its kind
// ("message" or "error"), signed for the session s: a page shows only
// what the console said to this session (flashOf), never the words of a
// link someone else made (/attention?message=Refunded, call 555-...).
func (c *Console) flash(back string, s *session, kind, text string) string {
	return back + "?" + kind + "=" + urlQuery(text) + "&sig=" + c.flashSig(s, kind, text)
}

func (c *Console) flashSig(s *session, kind, text string) string {
	return sign(c.secret, "flash|"+kind+"|"+s.Nonce+"|"+text)
}

// flashOf is the text of kind in r's query when the console set it there
// for the session s (flash), and "" otherwise.
func (c *Console) flashOf(r *http.Request, s *session, kind string) string {
	q := r.URL.Query()
	text := q.Get(kind)
	if text == "" || !hmac.Equal([]byte(q.Get("sig")), []byte(c.flashSig(s, kind, text))) {
		return ""
	}
	return text
}

// session is a logged-in operator.
type session struct {
	Operator string
	Nonce    string
	Expires  time.Time
}

// csrf is the session's token for forms: a signature of its nonce, so
// that it needs no storage and a page of another session cannot forge it.
func (s *session) csrf(secret []byte) string { return sign(secret, "csrf|"+s.Nonce) }

const cookieName = "rocketrides_console"

func sign(secret []byte, payload string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// encode is the cookie's value: the session, then its signature.
func (c *Console) encode(s *session) string {
	payload := base64.RawURLEncoding.EncodeToString([]byte(
		strconv.FormatInt(s.Expires.Unix(), 10) + "|" + s.Nonce + "|" + s.Operator))
	return payload + "." + sign(c.secret, payload)
}

// sessionOf returns the request's session, or nil when it has none that
// this console signed and that has not expired.
func (c *Console) sessionOf(r *http.Request) *session {
	cookie, err := r.Cookie(cookieName)
	if err != nil {
		return nil
	}
	payload, sig, ok := strings.Cut(cookie.Value, ".")
	if !ok || !hmac.Equal([]byte(sig), []byte(sign(c.secret, payload))) {
		return nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return nil
	}
	parts := strings.SplitN(string(raw), "|", 3)
	if len(parts) != 3 {
		return nil
	}
	exp, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || time.Now().Unix() > exp {
		return nil
	}
	return &session{Expires: time.Unix(exp, 0), Nonce: parts[1], Operator: parts[2]}
}

// page requires a session for a page that only reads.
func (c *Console) page(fn func(w http.ResponseWriter, r *http.Request, s *session)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := c.sessionOf(r)
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
		s := c.sessionOf(r)
		if s == nil {
			http.Error(w, "Log in first.", http.StatusUnauthorized)
			return
		}
		if !sameOrigin(r) {
			c.logger.WarnContext(r.Context(), "Refused a console action from another origin",
				slog.String("origin", r.Header.Get("Origin")), slog.String("referer", r.Header.Get("Referer")))
			http.Error(w, "Refused: the request did not come from this console.", http.StatusForbidden)
			return
		}
		if token := r.PostFormValue("csrf"); subtle.ConstantTimeCompare([]byte(token), []byte(s.csrf(c.secret))) != 1 {
			http.Error(w, "Refused: the form's token is missing or stale; reload the page.", http.StatusForbidden)
			return
		}
		fn(w, r, s)
	})
}

// sameOrigin reports whether r comes from a page of this console: its
// Origin header, or failing that its Referer, names the host r was sent
// to. A POST with neither is refused.
func sameOrigin(r *http.Request) bool {
	from := r.Header.Get("Origin")
	if from == "" || from == "null" {
		from = r.Header.Get("Referer")
	}
	u, err := url.Parse(from)
	if from == "" || err != nil {
		return false
	}
	return (u.Scheme == "http" || u.Scheme == "https") && u.Host == r.Host
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "login", nil, map[string]any{"Next": safeNext(r.URL.Query().Get("next"))})
}

// login checks the password (in constant time) and starts a session
// under the operator's name, which every settlement's audit record
// carries. Login is a POST like any other: it too must come from the
// console's own origin.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	operator := strings.TrimSpace(r.PostFormValue("operator"))
	password := r.PostFormValue("password")
	next := safeNext(r.PostFormValue("next"))
	// The form again, its name filled in. Not under "Operator": the
	// layout shows the logged-in navigation to a page that has one.
	refuse := func(status int, msg string) {
		c.renderStatus(w, r, status, "login", nil, map[string]any{"Next": next, "Error": msg, "Name": operator})
	}
	if !sameOrigin(r) {
		http.Error(w, "Refused: the request did not come from this console.", http.StatusForbidden)
		return
	}
	// The name goes on the audit record of every settlement, which
	// refuses one rides.ValidOperator refuses: better to hear it now.
	var refused *rides.OperatorError
	if errors.As(rides.ValidOperator(operator), &refused) {
		refuse(http.StatusBadRequest, fmt.Sprintf("Your name (operator) is refused: %s. It goes on the audit record of what you do.", refused.Reason))
		return
	}
	if subtle.ConstantTimeCompare(hashOf(password), hashOf(c.password)) != 1 {
		c.logger.WarnContext(r.Context(), "Console login refused", slog.String("operator", operator))
		refuse(http.StatusUnauthorized, "Wrong password.")
		return
	}
	nonce := make([]byte, 18)
	_, _ = rand.Read(nonce) // never fails (crypto/rand)
	s := &session{Operator: operator, Nonce: base64.RawURLEncoding.EncodeToString(nonce), Expires: time.Now().Add(sessionLifetime)}
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: c.encode(s), Path: "/", Expires: s.Expires,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	c.logger.InfoContext(r.Context(), "Console login", slog.String("operator", operator))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func hashOf(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }

func (c *Console) logout(w http.ResponseWriter, r *http.Request, _ *session) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
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
