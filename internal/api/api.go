// Package api assembles the HTTP server: routing, authentication, and the
// hygiene every endpoint shares (request ids, structured request logs,
// metrics, panic recovery, a body size limit, timeouts, graceful
// shutdown). It also serves the API's own description, docs/openapi.yaml,
// and its Prometheus metrics, and, on a separate listener, pprof.
package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rocketrides/rocketrides/docs"
	"github.com/rocketrides/rocketrides/internal/platform/logctx"
	"github.com/rocketrides/rocketrides/internal/platform/metrics"
	"github.com/rocketrides/rocketrides/internal/platform/problem"
	"github.com/rocketrides/rocketrides/internal/platform/serve"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/user"
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
	// Registry receives the HTTP and connection pool metrics, and
	// everything registered on it is served at GET /metrics. Nil means a
	// registry of the handler's own.
	Registry *prometheus.Registry
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
	r.Use(middleware.RequestID)
	r.Use(requestLog(logger, metrics.NewHTTP(reg)))
	r.Use(recoverPanic(logger))
	r.Use(limitBody(MaxBodyBytes))

	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		problem.New(http.StatusNotFound, "not_found", "No such endpoint: "+r.URL.Path).Write(w)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		// RFC 9110 requires a 405 to say what is allowed; chi's own 405
		// does, but a custom handler has to look it up.
		w.Header().Set("Allow", strings.Join(allowedMethods(r, req.URL.Path), ", "))
		problem.New(http.StatusMethodNotAllowed, "method_not_allowed",
			req.Method+" is not supported on "+req.URL.Path).Write(w)
	})

	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	r.Get("/readyz", readyz(config.Pool))
	// Unauthenticated, like /healthz: keep it off the public internet at
	// the load balancer rather than handing Prometheus an API token.
	r.Method(http.MethodGet, "/metrics", metrics.Handler(reg))
	r.Get("/openapi.yaml", serveOpenAPI)

	r.Group(func(r chi.Router) {
		r.Use(authenticate(config.Pool, logger))
		config.Rides.Mount(r)
	})
	return &Handler{router: r}, nil
}

// ServeHTTP serves the API.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.router.ServeHTTP(w, r)
}

// allowedMethods lists the methods routes serves path with.
func allowedMethods(routes chi.Routes, path string) []string {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
		http.MethodPatch, http.MethodDelete, http.MethodOptions} {
		if routes.Match(chi.NewRouteContext(), m, path) {
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

// authenticate resolves "Authorization: Bearer <token>" to a user.
func authenticate(pool *pgxpool.Pool, logger *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
			token = strings.TrimSpace(token)
			if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
				unauthorized(w, "Send your API token as Authorization: Bearer <token>.")
				return
			}
			u, err := user.ByToken(r.Context(), pool, token)
			if errors.Is(err, user.ErrNotFound) {
				unauthorized(w, "The API token is not valid.")
				return
			}
			if err != nil {
				logger.ErrorContext(r.Context(), "Check API token", slog.Any("error", err))
				problem.New(http.StatusServiceUnavailable, "unavailable",
					"Could not check the API token; retry shortly.").WithRetryAfter(1).Write(w)
				return
			}
			logctx.Set(r.Context(), slog.Int64(logctx.UserID, u.ID))
			next.ServeHTTP(w, r.WithContext(user.NewContext(r.Context(), u)))
		})
	}
}

func unauthorized(w http.ResponseWriter, detail string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="rocketrides"`)
	problem.New(http.StatusUnauthorized, "unauthorized", detail).Write(w)
}

// serveOpenAPI serves the API's description, from which clients can be
// generated. It is the same file the tests validate every request and
// response against.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(docs.OpenAPI)
}

// readyz reports whether the database answers; a load balancer stops
// sending traffic while it does not.
func readyz(pool *pgxpool.Pool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := pool.Ping(ctx); err != nil {
			problem.New(http.StatusServiceUnavailable, "database_unavailable", "The database does not answer.").Write(w)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ready\n"))
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

// requestLog writes one structured line per request, records the request
// in the HTTP metrics, and echoes the request id to the client, so a
// support question can quote it.
//
// It also gives the request its log attribute set (package logctx),
// starting with the request id: every line logged with the request's
// context carries it, and whatever inner layers add (the user, the
// idempotency key and its recovery point) is on this line too, written
// after them.
func requestLog(logger *slog.Logger, m *metrics.HTTP) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			reqID := middleware.GetReqID(r.Context())
			w.Header().Set("Request-Id", reqID)
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
			level := slog.LevelInfo
			if status >= 500 {
				level = slog.LevelWarn
			}
			logger.LogAttrs(r.Context(), level, "Served request",
				slog.String("method", r.Method),
				slog.String("route", route),
				slog.String("path", r.URL.Path),
				slog.Int("status", status),
				slog.Int("bytes", ww.BytesWritten()),
				slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000),
				slog.String("remote", r.RemoteAddr),
				slog.Bool("replayed", ww.Header().Get("Idempotent-Replayed") == "true"),
			)
		})
	}
}
