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
//     receipt, and a link to its trace (Config.TraceURL).
//   - Needs attention: the keys set aside for a person, with what Stripe
//     holds for each, and the three settlements of package rides.
//   - The reaper's abandoned requests and the reconciler's findings.
//
// It is an operator tool over payment data: every page needs a login to
// a person's own account (package operator), whose name every
// settlement's audit record carries; sessions are kept on the server, so
// logging out or disabling the account ends them; it answers only to its
// own names (Config.Hosts: no DNS rebinding); every POST is checked
// against the console's own origin, exactly, and a per-session token; templates escape everything, and API tokens are never read, let
// alone shown.
package console

import (
	"cmp"
	"crypto/hmac"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
	"riverqueue.com/riverui"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/operator"
	"github.com/rocketrides/rocketrides/internal/rides"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config configures the console.
type Config struct {
	// Pool is the Rocket Rides database. Required.
	Pool *pgxpool.Pool
	// Keys is the idempotency-key store, its Actor "console". Required.
	Keys *idem.Store
	// Rides settles keys set aside and asks Stripe about a request.
	// Required.
	Rides *rides.Service
	// Operators are the accounts people log in to, and their sessions.
	// Required.
	Operators *operator.Store
	// TrustProxy says the console is reached through a reverse proxy
	// whose X-Forwarded-Proto names the scheme the browser used
	// (CONSOLE_TRUST_PROXY): https there makes the cookie Secure and is
	// the scheme an Origin must have. The last address of its
	// X-Forwarded-For is then the client's (clientIP). Never set it where
	// browsers reach the console directly: they could then claim either
	// scheme, and any address.
	TrustProxy bool
	// Hosts are the values of the Host header the console answers to
	// (ListenHosts, and CONSOLE_HOSTS behind a proxy); any other is
	// refused 421 before anything is served, so that a page of another
	// site whose name resolves to the console's address (DNS rebinding)
	// reaches nothing, its login included. An entry with a port matches
	// that host and port; one without, the host on any port; one whose
	// host is an unspecified address (0.0.0.0:5050), any IP address on
	// its port, as a listener there answers to them all. Required.
	Hosts []string
	// TraceURL is the address of a trace in a trace viewer, with
	// TraceIDPlaceholder where the trace's id goes (CONSOLE_TRACE_URL):
	// a request's story links to the trace of the request that claimed
	// its key. Empty: no link.
	TraceURL string
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
	case c.Operators == nil:
		return errors.New("console: Config.Operators is required")
	case len(c.Hosts) == 0:
		return errors.New("console: Config.Hosts is required")
	case c.TraceURL != "" && !strings.Contains(c.TraceURL, TraceIDPlaceholder):
		return errors.New("console: Config.TraceURL must have " + TraceIDPlaceholder + " where the trace's id goes")
	}
	if c.Lab != nil {
		return c.Lab.validate()
	}
	return nil
}

// Console is the console's HTTP handler.
type Console struct {
	pool       *pgxpool.Pool
	keys       *idem.Store
	rides      *rides.Service
	operators  *operator.Store
	trustProxy bool
	hosts      []string
	traceURL   string
	logger     *slog.Logger
	pages      map[string]*template.Template
	mux        *http.ServeMux
	// failuresHTML is docs/failures.md, rendered once.
	failuresHTML template.HTML
	lab          *Lab
	labRuns      labRuns
	labRunning   atomic.Bool
	labClient    *http.Client
	river        *riverui.Handler
	// commits is who confirms commits, checked at most once per
	// eventInterval however many pages ask (pages.go).
	commits commitsCheck
}

// New returns the console for config.
func New(config *Config) (*Console, error) {
	if config == nil {
		return nil, errors.New("console: Config is required")
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	c := &Console{
		pool:       config.Pool,
		keys:       config.Keys,
		rides:      config.Rides,
		operators:  config.Operators,
		trustProxy: config.TrustProxy,
		hosts:      config.Hosts,
		traceURL:   config.TraceURL,
		logger:     cmp.Or(config.Logger, slog.Default()),
		pages:      map[string]*template.Template{},
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
	if !servesHost(c.hosts, r.Host) {
		c.logger.WarnContext(r.Context(), "Refused a console request for another host", slog.String("host", r.Host))
		http.Error(w, "Refused: this console does not answer to that host name (CONSOLE_HOSTS lists the names it serves behind a proxy).",
			http.StatusMisdirectedRequest)
		return
	}
	c.mux.ServeHTTP(w, r)
}

// servesHost reports whether host, a request's Host header, matches one
// of hosts (Config.Hosts).
func servesHost(hosts []string, host string) bool {
	name, port, err := net.SplitHostPort(host)
	if err != nil {
		name, port = host, ""
	}
	for _, h := range hosts {
		hName, hPort, err := net.SplitHostPort(h)
		if err != nil {
			hName, hPort = h, ""
		}
		if hPort != "" && hPort != port {
			continue
		}
		if strings.EqualFold(hName, name) {
			return true
		}
		// A listener on every address answers to each IP address; an
		// IP address is no name a rebinding page could borrow.
		if ip, err := netip.ParseAddr(hName); err == nil && ip.IsUnspecified() {
			if _, err := netip.ParseAddr(name); err == nil {
				return true
			}
		}
	}
	return false
}

// ListenHosts are the Host values a console listening on addr (host:port,
// as the listener took it) answers to: the address itself, and
// localhost on its port when it is a loopback or unspecified address.
func ListenHosts(addr string) []string {
	hosts := []string{addr}
	host, port, err := net.SplitHostPort(addr)
	if ip, perr := netip.ParseAddr(host); err == nil && perr == nil && (ip.IsLoopback() || ip.IsUnspecified()) {
		hosts = append(hosts, net.JoinHostPort("localhost", port))
	}
	return hosts
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
	return back + "?" + kind + "=" + urlQuery(text) + "&sig=" + flashSig(s, kind, text)
}

func flashSig(s *session, kind, text string) string { return s.Sign("flash|" + kind + "|" + text) }

// flashOf is the text of kind in r's query when the console set it there
// for the session s (flash), and "" otherwise.
func (c *Console) flashOf(r *http.Request, s *session, kind string) string {
	q := r.URL.Query()
	text := q.Get(kind)
	if text == "" || !hmac.Equal([]byte(q.Get("sig")), []byte(flashSig(s, kind, text))) {
		return ""
	}
	return text
}
