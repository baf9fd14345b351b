// Package api assembles the HTTP server: routing, authentication, and the
// hygiene every endpoint shares (request ids, structured request logs,
// metrics, panic recovery, a body size limit, timeouts, graceful
// shutdown). It also serves the API's own description, docs/openapi.yaml.
// Its Prometheus metrics and pprof are served on listeners of their own,
// never on the public port.
package api

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rocketrides/rocketrides/docs"
	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/platform/logctx"
	"github.com/rocketrides/rocketrides/internal/platform/metrics"
	"github.com/rocketrides/rocketrides/internal/platform/problem"
	"github.com/rocketrides/rocketrides/internal/platform/serve"
	"github.com/rocketrides/rocketrides/internal/platform/trace"
	"github.com/rocketrides/rocketrides/internal/ratelimit"
	"github.com/rocketrides/rocketrides/internal/rides"
)

// MaxBodyBytes bounds every request body.
const MaxBodyBytes = 64 << 10

// Config configures the API's Handler. Pool and Rides are required.
type Config struct {
	// Pool is the database: users for authentication, and /readyz.
	// Required.
	Pool *pgxpool.Pool
	// Rides serves the ride endpoints. Required.
	Rides *rides.Handler
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registry receives the HTTP and connection pool metrics. The API
	// does not serve it: the process serves it on its metrics listener
	// (METRICS_ADDR), apart from the public port. Nil means a registry of
	// the handler's own.
	Registry *prometheus.Registry
	// Limits are the rate limits every authenticated request passes
	// first: requests per API token, failed authentications per client
	// address. Nil applies none. (The cap on charges is the ride
	// service's.)
	Limits *ratelimit.Limiter
}

func (c *Config) validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("api: Config.Pool is required")
	case c.Rides == nil:
		return errors.New("api: Config.Rides is required")
	}
	return nil
}

// Handler is the API's root handler: every route, behind the hygiene
// every endpoint shares.
type Handler struct {
	router http.Handler
}

// New returns the API's root handler for config.
func New(config *Config) (*Handler, error) {
	if config == nil {
		return nil, errors.New("api: Config is required (Pool and Rides)")
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	logger := cmp.Or(config.Logger, slog.Default())
	reg := config.Registry
	if reg == nil {
		reg = metrics.NewRegistry()
	}
	metrics.RegisterPool(reg, config.Pool)

	r := chi.NewRouter()
	r.Use(requestLog(logger, metrics.NewHTTP(reg), newRequestIDs()))
	r.Use(recoverPanic(logger))
	// HEAD on every GET route, as RFC 9110 asks and load balancers use;
	// net/http sends the headers and drops the body.
	r.Use(middleware.GetHead)

	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		problem.New(http.StatusNotFound, "not_found", "No such endpoint: "+problem.Clip(r.URL.Path)).Write(w)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		// RFC 9110 requires a 405 to say what is allowed; chi's own 405
		// does, but a custom handler has to look it up.
		w.Header().Set("Allow", strings.Join(allowedMethods(r, req.URL.Path), ", "))
		problem.New(http.StatusMethodNotAllowed, "method_not_allowed",
			problem.Clip(req.Method)+" is not supported on "+problem.Clip(req.URL.Path)).Write(w)
	})

	// The checks every request's body passes run once the request is
	// routed, so that what they refuse is counted under its route.
	r.Group(func(r chi.Router) {
		r.Use(answerStalledBody)
		r.Use(limitBody(MaxBodyBytes))
		r.Use(refuseContentEncoding)

		r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("ok\n"))
		})
		r.Get("/readyz", readyz(config.Pool, logger, metrics.NewCommitsConfirmed(reg)))
		r.Get("/openapi.yaml", serveOpenAPI)
		r.Get("/errors", serveErrors)

		r.Group(func(r chi.Router) {
			r.Use(authenticate(config.Pool, config.Limits, logger))
			config.Rides.Mount(r)
		})
	})
	return &Handler{router: trace.Handler(r)}, nil
}

// ServeHTTP serves the API.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.router.ServeHTTP(w, r)
}

// allowedMethods lists the methods routes serves path with. HEAD is
// served wherever GET is (middleware.GetHead).
func allowedMethods(routes chi.Routes, path string) []string {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
		http.MethodPatch, http.MethodDelete, http.MethodOptions} {
		if routes.Match(chi.NewRouteContext(), m, path) ||
			m == http.MethodHead && routes.Match(chi.NewRouteContext(), http.MethodGet, path) {
			allowed = append(allowed, m)
		}
	}
	return allowed
}

// ServerConfig is the API's HTTP server on addr. WriteTimeout leaves room
// for the Stripe call and its retries, and the shutdown lets a request
// that started just before it run to its WriteTimeout. A request cut off
// anyway is safe: its key stays resumable.
func ServerConfig(addr string, h http.Handler, logger *slog.Logger) *serve.Config {
	return &serve.Config{
		Name:              "api",
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      90 * time.Second,
		IdleTimeout:       120 * time.Second,
		ShutdownTimeout:   95 * time.Second,
		Logger:            logger,
	}
}

// serveOpenAPI serves the API's description, from which clients can be
// generated. It is the same file the tests validate every request and
// response against.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(docs.OpenAPI)
}

// serveErrors serves docs/errors.md, the page every problem's type names
// unless PROBLEM_TYPE_BASE points elsewhere. Plain text, which a browser
// shows, where it would download text/markdown.
func serveErrors(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write(docs.Errors)
}

// readyz reports whether the database answers and takes commits; a load
// balancer stops sending traffic while it does not. A synchronous primary
// whose standby is gone answers every read but holds every commit, so a
// ride would hang until its client gave up: that is not ready either, and
// a bounded probe commit (db.CheckDurability) says so within a second.
//
// Commits confirmed by the primary alone are ready: a single-node
// cluster's always are, and a replicated one's are while its HA manager
// has let the primary go on without its lost standby (Patroni's
// non-strict synchronous mode). Taking every instance out of the load
// balancer then would turn a loss of redundancy into an outage. The body
// says who confirms commits, the gauge commits tells it to alerting, and
// a log line marks each change.
func readyz(pool *pgxpool.Pool, logger *slog.Logger, confirmed prometheus.Gauge) http.HandlerFunc {
	type seen struct {
		commits string
		standby bool
	}
	var last atomic.Pointer[seen]
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		// CheckDurability's first read is the ping: one round trip unless
		// the primary names synchronous standbys.
		var wait *db.CommitsWaitError
		d, err := db.CheckDurability(ctx, pool, db.CommitProbeTimeout)
		switch {
		case errors.As(err, &wait):
			problem.New(http.StatusServiceUnavailable, "database_commits_waiting",
				"The database holds every commit for a synchronous standby that is not confirming them (synchronous_standby_names = "+
					strconv.Quote(wait.Standbys)+").").Write(w)
			return
		case err != nil:
			problem.New(http.StatusServiceUnavailable, "database_unavailable", "The database does not answer.").Write(w)
			return
		}
		commits := d.String()
		if d.StandbyConfirms {
			confirmed.Set(1)
		} else {
			confirmed.Set(0)
		}
		if prev := last.Swap(&seen{commits, d.StandbyConfirms}); prev == nil || prev.commits != commits {
			attrs := []any{slog.String("commits", commits), slog.Int("standbys_streaming", d.Streaming)}
			switch {
			case d.StandbyConfirms:
				logger.InfoContext(r.Context(), "Commits confirmed by a synchronous standby", attrs...)
			case prev != nil && prev.standby: // a standby stopped confirming them
				logger.WarnContext(r.Context(), "Commits confirmed by the primary alone", attrs...)
			default:
				logger.InfoContext(r.Context(), "Commits confirmed by the primary alone", attrs...)
			}
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ready\ncommits: " + commits + "\n"))
	}
}

// limitBody caps request bodies; reading past the cap fails with
// *http.MaxBytesError, which handlers turn into 413.
func limitBody(n int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ContentLength > n {
				problem.New(http.StatusRequestEntityTooLarge, "body_too_large",
					fmt.Sprintf("The request body is larger than %d bytes.", n)).Write(w)
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, n)
			next.ServeHTTP(w, r)
		})
	}
}

// bodyRetryAfter is the Retry-After, in seconds, of a 408: the client's
// own network stalled, and it may send the request again at once.
const bodyRetryAfter = 1

// answerStalledBody answers 408 request_timeout, and closes the
// connection, to a request whose body stopped arriving: the server's
// ReadTimeout passed while a handler was still reading it. Whatever the
// handler made of a body cut short (a 400 malformed_body, once) stands
// for nothing; the request was never received whole, and a client
// following the retry protocol sends it again with the same key. No
// handler acts on a body it could not read whole (POST /rides checks the
// body before it uses the key), so there is nothing to undo.
func answerStalledBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		sw := &stalledWriter{ResponseWriter: w, before: w.Header().Clone()}
		r.Body = &stallingBody{ReadCloser: r.Body, stalled: &sw.stalled}
		next.ServeHTTP(sw, r)
	})
}

// stallingBody notes when reading the body fails on the server's read
// deadline.
type stallingBody struct {
	io.ReadCloser
	stalled *bool
}

func (b *stallingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var netErr net.Error
	if err != nil && (errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout()) {
		*b.stalled = true
	}
	return n, err
}

// stalledWriter sends the handler's answer, unless the body stalled
// before the handler answered: then it sends the 408 instead, with the
// headers set before the handler ran (the request id) and none of the
// handler's.
type stalledWriter struct {
	http.ResponseWriter
	before   http.Header
	stalled  bool
	answered bool // the handler's answer has started
	replaced bool // the 408 went out instead
}

func (w *stalledWriter) WriteHeader(status int) {
	switch {
	case w.answered || w.replaced:
		return
	case !w.stalled:
		w.answered = true
		w.ResponseWriter.WriteHeader(status)
		return
	}
	w.replaced = true
	h := w.Header()
	clear(h)
	maps.Copy(h, w.before)
	// RFC 9110, section 15.5.9: the server closes the connection.
	h.Set("Connection", "close")
	problem.New(http.StatusRequestTimeout, "request_timeout",
		"The request body stopped arriving before it was complete. Nothing was done; send the request again, with the same Idempotency-Key.").
		WithRetryAfter(bodyRetryAfter).Write(w.ResponseWriter)
}

func (w *stalledWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if w.replaced {
		return len(b), nil // the handler's body, for an answer not sent
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *stalledWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// refuseContentEncoding answers 415 to a request whose body is encoded
// (Content-Encoding: gzip, br, ...). The API decodes no content coding;
// reading a compressed body as if it were plain would only fail later and
// less precisely. RFC 9110, section 15.5.16: the answer lists the coding
// the API accepts in Accept-Encoding.
func refuseContentEncoding(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 {
			for _, v := range r.Header.Values("Content-Encoding") {
				for coding := range strings.SplitSeq(v, ",") {
					coding = strings.TrimSpace(coding)
					if coding != "" && !strings.EqualFold(coding, "identity") {
						w.Header().Set("Accept-Encoding", "identity")
						problem.New(http.StatusUnsupportedMediaType, "unsupported_content_encoding",
							fmt.Sprintf("Content-Encoding %q is not supported; send the body unencoded.", problem.Clip(coding))).Write(w)
						return
					}
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// recoverPanic turns a panic into a logged 500 problem instead of a
// dropped connection. chi's Recoverer answers in plain text; the API's
// errors are problem documents.
func recoverPanic(logger *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				rec := recover()
				if rec == nil || rec == http.ErrAbortHandler {
					if rec != nil {
						panic(rec)
					}
					return
				}
				logger.ErrorContext(r.Context(), "Panic serving request",
					slog.Any("panic", rec), slog.String("stack", string(debug.Stack())))
				problem.New(http.StatusInternalServerError, "internal_error", "Something went wrong on our side.").Write(w)
			}()
			next.ServeHTTP(w, r)
		})
	}
}

// requestIDs hands out the server's request ids: a random prefix per
// process and a counter, unique across instances and restarts without a
// random read per request. The client never chooses one: an id it chose
// could make its lines carry another request's id.
type requestIDs struct {
	prefix string
	n      atomic.Uint64
}

func newRequestIDs() *requestIDs {
	b := make([]byte, 6)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return &requestIDs{prefix: "req_" + hex.EncodeToString(b) + "_"}
}

func (g *requestIDs) next() string {
	return g.prefix + strconv.FormatUint(g.n.Add(1), 10)
}

// maxClientRequestID bounds the client's own request id as logged.
const maxClientRequestID = 64

// clientRequestID is the X-Request-Id a client sent, as it may be logged:
// at most maxClientRequestID bytes, each printable ASCII (anything else
// becomes '?'), and "..." when cut. It is logged apart from request_id,
// so a client can correlate its own ids without choosing ours.
func clientRequestID(v string) string {
	cut := len(v) > maxClientRequestID
	if cut {
		v = v[:maxClientRequestID]
	}
	b := []byte(v)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	if cut {
		b = append(b, "..."...)
	}
	return string(b)
}

// requestLog writes one structured line per request, records the request
// in the HTTP metrics, and sends the request id to the client, so a
// support question can quote it.
//
// It also gives the request its log attribute set (package logctx),
// starting with the request id: every line logged with the request's
// context carries it, and whatever inner layers add (the user, the
// idempotency key and its recovery point) is on this line too, written
// after them. What the client chose (the path, its own X-Request-Id) is
// clipped, so that a request cannot make its line as long as itself.
func requestLog(logger *slog.Logger, m *metrics.HTTP, ids *requestIDs) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			reqID := ids.next()
			h := w.Header()
			h.Set("Request-Id", reqID)
			// Every answer is about one user's payments, or about now:
			// no cache keeps it (a shared one would hand it to another
			// client), and no client guesses its type from its bytes.
			h.Set("Cache-Control", "no-store")
			h.Set("X-Content-Type-Options", "nosniff")
			r = r.WithContext(logctx.New(r.Context(), slog.String(logctx.RequestID, reqID)))
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r)
			status := ww.Status()
			if status == 0 {
				status = http.StatusOK
			}
			elapsed := time.Since(start)
			// Known only now that the router has matched the request.
			route := chi.RouteContext(r.Context()).RoutePattern()
			m.Observe(r.Method, route, status, elapsed)
			trace.Route(r.Context(), r.Method, route)
			level := slog.LevelInfo
			if status >= 500 {
				level = slog.LevelWarn
			}
			attrs := []slog.Attr{
				slog.String("method", problem.Clip(r.Method)),
				slog.String("route", route),
				slog.String("path", problem.Clip(r.URL.Path)),
				slog.Int("status", status),
				slog.Int("bytes", ww.BytesWritten()),
				slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000),
				slog.String("remote", r.RemoteAddr),
				slog.Bool("replayed", ww.Header().Get("Idempotent-Replayed") == "true"),
			}
			if v := r.Header.Get("X-Request-Id"); v != "" {
				attrs = append(attrs, slog.String("client_request_id", clientRequestID(v)))
			}
			logger.LogAttrs(r.Context(), level, "Served request", attrs...)
		})
	}
}
