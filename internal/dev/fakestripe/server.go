package fakestripe

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
)

// DefaultKeyRetention is how long a stored idempotent result is kept when
// Config.KeyRetention is zero. Stripe keeps keys for at least 24 hours.
const DefaultKeyRetention = 24 * time.Hour

// Config configures a Server. Every field is optional; a nil Config is
// the zero value.
type Config struct {
	// KeyRetention is how long the result stored against an idempotency key
	// is replayed, counted from the key's first use. After that the key is
	// forgotten and a request with it executes again. Zero means
	// DefaultKeyRetention.
	KeyRetention time.Duration

	// Logger receives one line per request. Nil discards them.
	Logger *slog.Logger

	// Now is the clock behind the "created" timestamps and key retention.
	// Nil means time.Now. Server.Advance moves whichever clock this is
	// forward, so tests can also leave it nil.
	Now func() time.Time

	// StatePath is a file that keeps the account (customers, charges and
	// stored idempotent results) across restarts: it is read by New and
	// appended to as the account changes. Empty keeps it in memory only,
	// gone when the Server is. Faults and Stats are never kept.
	StatePath string
}

// Server is the fake's in-memory Stripe account and its HTTP API. It is an
// http.Handler; all its state is guarded by one mutex, so it is safe for
// concurrent requests and for tests poking at it while requests are in
// flight. Customers and charges are never modified in place (an update
// replaces the charge with a changed copy), so a handler that found one
// under the mutex may render it after releasing it; what the exported
// methods return are copies.
type Server struct {
	handler      http.Handler
	keyRetention time.Duration
	logger       *slog.Logger
	now          func() time.Time

	mu          sync.Mutex
	clockOffset time.Duration
	charges     []*Charge // in creation order
	chargesByID map[string]*Charge
	customers   []*Customer // in creation order
	customersBy map[string]*Customer
	faults      Faults
	idempotency map[idempotencyScope]*idempotencyRecord
	journal     *journal // nil without Config.StatePath
	lastSweep   time.Time
	stats       Stats
}

func (c *Config) validate() error {
	if c.KeyRetention < 0 {
		return fmt.Errorf("fakestripe: Config.KeyRetention must not be negative, got %s", c.KeyRetention)
	}
	return nil
}

// New returns a Server with no faults, and with no customers and no
// charges but those kept at Config.StatePath. Close it when it has one.
func New(config *Config) (*Server, error) {
	if config == nil {
		config = &Config{}
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	s := &Server{
		keyRetention: cmp.Or(config.KeyRetention, DefaultKeyRetention),
		logger:       cmp.Or(config.Logger, slog.New(slog.DiscardHandler)),
		now:          config.Now,
		chargesByID:  make(map[string]*Charge),
		customersBy:  make(map[string]*Customer),
		idempotency:  make(map[idempotencyScope]*idempotencyRecord),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if config.StatePath != "" {
		var err error
		if s.journal, err = openJournal(config.StatePath, s); err != nil {
			return nil, err
		}
	}
	s.handler = s.routes()
	return s, nil
}

func (s *Server) routes() http.Handler {
	r := chi.NewRouter()
	r.Use(s.logRequests)

	// Stripe answers unknown paths and methods alike with a 404 in its usual
	// error envelope. Set before the subrouters so they inherit it.
	r.NotFound(s.unrecognizedURL)
	r.MethodNotAllowed(s.unrecognizedURL)

	// Test controls; no API key, so black-box tests can reach them with curl.
	r.Route("/_fake", func(r chi.Router) {
		r.Get("/faults", s.getFaults)
		r.Post("/faults", s.patchFaults)
		r.Delete("/faults", s.deleteFaults)
		r.Get("/stats", s.getStats)
	})

	r.Route("/v1", func(r chi.Router) {
		r.Use(s.authenticate)

		r.Post("/customers", s.idempotent(s.createCustomer))
		r.Get("/customers", s.listCustomers)
		r.Get("/customers/{id}", s.getCustomer)

		r.With(s.chargeFrontDoor).Post("/charges", s.idempotent(s.createCharge))
		r.Get("/charges", s.listCharges)
		r.Get("/charges/{id}", s.getCharge)
		r.Post("/charges/{id}", s.idempotent(s.updateCharge))
	})
	return r
}

// ServeHTTP serves Stripe's API under /v1 and the fake's controls under
// /_fake.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.handler.ServeHTTP(w, r)
}

// Advance moves the server's clock forward by d: new objects are created
// later and stored idempotent results age, without the test sleeping.
func (s *Server) Advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clockOffset += d
}

// Stats counts what the server has done since it started. Its JSON form is
// served at GET /_fake/stats.
type Stats struct {
	// Charges is the number of charge objects, failed (declined) ones
	// included, as Stripe's charge list would show them.
	Charges int `json:"charges"`
	// Customers is the number of customer objects.
	Customers int `json:"customers"`
	// ChargeRequests counts authenticated POST /v1/charges requests,
	// whatever became of them: replayed, rejected, failed or dropped.
	ChargeRequests int `json:"charge_requests"`
	// Replays counts responses replayed from an idempotency key, on any
	// endpoint.
	Replays int `json:"replays"`
	// IdempotencyMismatches counts requests refused because their
	// idempotency key was first used for another endpoint or other
	// parameters: a client that reused a key for a different request.
	IdempotencyMismatches int `json:"idempotency_mismatches"`
	// DroppedAnswers counts answers the server dropped the connection
	// instead of sending (DropAfterCommitNext, DropAnswerNext): each
	// request took effect, and its client never heard.
	DroppedAnswers int `json:"dropped_answers"`
}

// Stats returns the current counts.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	stats := s.stats
	stats.Charges = len(s.charges)
	stats.Customers = len(s.customers)
	return stats
}

func (s *Server) getStats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}

// nowLocked reads the clock. s.mu must be held because of the offset.
func (s *Server) nowLocked() time.Time {
	return s.now().Add(s.clockOffset)
}

type apiKeyContextKey struct{}

// apiKey returns the secret key authenticate accepted for r.
func apiKey(r *http.Request) string {
	key, _ := r.Context().Value(apiKeyContextKey{}).(string)
	return key
}

// authenticate rejects requests without a secret key, in either of the two
// forms Stripe accepts: a bearer token, or the user of HTTP basic auth (how
// curl -u sk_test_...: sends it).
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := "", false
		if user, _, basic := r.BasicAuth(); basic {
			key, ok = user, true
		} else if bearer, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); found {
			key, ok = strings.TrimSpace(bearer), true
		}

		switch {
		case !ok || key == "":
			writeError(w, invalidRequest(http.StatusUnauthorized, "", "",
				"You did not provide an API key. You need to provide your API key in the Authorization header, "+
					"using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY')."))
			return
		case !strings.HasPrefix(key, "sk_") || len(key) == len("sk_"):
			writeError(w, invalidRequest(http.StatusUnauthorized, "", "",
				"Invalid API Key provided: %s", redactKey(key)))
			return
		}

		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), apiKeyContextKey{}, key)))
	})
}

// redactKey keeps only enough of a key to recognise it in an error message.
func redactKey(key string) string {
	if len(key) <= 12 {
		visible := min(len(key), 3)
		return key[:visible] + strings.Repeat("*", len(key)-visible)
	}
	return key[:8] + strings.Repeat("*", len(key)-12) + key[len(key)-4:]
}

func (s *Server) unrecognizedURL(w http.ResponseWriter, r *http.Request) {
	writeError(w, invalidRequest(http.StatusNotFound, "", "",
		"Unrecognized request URL (%s: %s).", r.Method, r.URL.Path))
}

// logRequests logs one line per request. It records the status through a
// wrapper that still lets the drop fault hijack the connection, which
// http.ResponseController finds through Unwrap.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)

		attrs := []any{
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", rec.status),
			slog.Duration("duration", time.Since(start)),
		}
		if key := r.Header.Get("Idempotency-Key"); key != "" {
			attrs = append(attrs, slog.String("idempotency_key", key))
		}
		if rec.Header().Get("Idempotent-Replayed") == "true" {
			attrs = append(attrs, slog.Bool("replayed", true))
		}
		if rec.status == 0 {
			s.logger.InfoContext(r.Context(), "Dropped connection without a response", attrs...)
			return
		}
		s.logger.InfoContext(r.Context(), "Served request", attrs...)
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// writeJSON sends v as a Stripe response. Every response carries a
// Request-Id, which stripe-go surfaces on its errors and responses.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body = mustMarshal(internalError("encode response: %v", err).envelope())
	}
	writeBody(w, status, body)
}

func writeBody(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	if w.Header().Get("Request-Id") == "" {
		w.Header().Set("Request-Id", newID("req_", 14))
	}
	w.WriteHeader(status)
	_, _ = w.Write(body) // a client that hung up is not the server's error
}

func writeError(w http.ResponseWriter, err *apiError) {
	writeJSON(w, err.status, err.envelope())
}

// mustMarshal encodes values that are built from plain strings and numbers
// and so cannot fail to encode.
func mustMarshal(v any) []byte {
	body, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("fakestripe: encode %T: %v", v, err))
	}
	return body
}

const idAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// newID returns prefix followed by n random alphanumerics, the shape of
// Stripe's object IDs (ch_..., cus_..., card_..., req_...).
func newID(prefix string, n int) string {
	random := make([]byte, n)
	_, _ = rand.Read(random) // crypto/rand.Read never returns an error
	id := make([]byte, 0, len(prefix)+n)
	id = append(id, prefix...)
	for _, b := range random {
		// 256 is not a multiple of 62, so this is very slightly biased;
		// IDs need to be unique, not uniform.
		id = append(id, idAlphabet[int(b)%len(idAlphabet)])
	}
	return string(id)
}
