package rides

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/platform/failpoint"
	"github.com/rocketrides/rocketrides/internal/platform/problem"
	"github.com/rocketrides/rocketrides/internal/platform/trace"
	"github.com/rocketrides/rocketrides/internal/ratelimit"
	"github.com/rocketrides/rocketrides/internal/user"
)

// Idempotency-Key limits. Short keys are too easy to collide by accident;
// a UUID is 36 characters.
const (
	MinKeyLength = 20
	MaxKeyLength = 255
)

// Handler serves the ride endpoints. It is the HTTP edge: the only place
// where errors become status codes and problem documents.
type Handler struct {
	svc             *Service
	pool            *pgxpool.Pool
	logger          *slog.Logger
	simulatedErrors bool
	fail            *failpoint.Set
}

// HandlerConfig configures a Handler.
type HandlerConfig struct {
	// Service runs the ride requests. Required.
	Service *Service
	// Pool is where rides are read for GET. Required.
	Pool *pgxpool.Pool
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// SimulatedErrors accepts raise_error=true, which fails a request on
	// purpose after its ride is created.
	SimulatedErrors bool
	// Failpoint is the failpoints armed, of which the handler passes
	// FailBeforeResponse; nil arms none.
	Failpoint *failpoint.Set
}

func (c *HandlerConfig) validate() error {
	switch {
	case c.Service == nil:
		return errors.New("rides: HandlerConfig.Service is required")
	case c.Pool == nil:
		return errors.New("rides: HandlerConfig.Pool is required")
	}
	return nil
}

// NewHandler returns a Handler for config.
func NewHandler(config *HandlerConfig) (*Handler, error) {
	if config == nil {
		config = &HandlerConfig{}
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	return &Handler{
		svc:             config.Service,
		pool:            config.Pool,
		logger:          cmp.Or(config.Logger, slog.Default()),
		simulatedErrors: config.SimulatedErrors,
		fail:            config.Failpoint,
	}, nil
}

// Mount adds the ride routes to r. They expect an authenticated user in
// the request context (user.NewContext).
func (h *Handler) Mount(r chi.Router) {
	r.Post("/rides", h.create)
	r.Get("/rides", h.list)
	r.Get("/rides/{id}", h.get)
}

// create serves POST /rides. Everything about the request is checked
// before the idempotency key is touched, so a rejected request leaves no
// row behind.
func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	u := user.FromContext(ctx)

	key, prob := idempotencyKey(r.Header.Values("Idempotency-Key"))
	if prob != nil {
		refuse(ctx, w, prob)
		return
	}
	raw, err := decodeBody(r.Header.Get("Content-Type"), r.Body)
	if err != nil {
		refuse(ctx, w, bodyProblem(err))
		return
	}
	params, raiseError, err := parseParams(raw, h.simulatedErrors)
	if err != nil {
		refuse(ctx, w, bodyProblem(err))
		return
	}

	req := CreateRequest{
		User:           u,
		IdempotencyKey: key,
		Params:         params,
		OriginIP:       ClientIP(r),
		RaiseError:     raiseError,
		RememberedFor:  user.Remembered(ctx),
	}
	res, err := h.svc.Create(ctx, req)
	if user.IsTokenChanged(err) {
		// The user remembered for the token no longer holds it as
		// remembered, and nothing was claimed: authenticate afresh.
		var ok bool
		if req.User, ok = user.Reauthenticate(ctx); !ok {
			return
		}
		req.RememberedFor = nil
		res, err = h.svc.Create(ctx, req)
	}
	if err == nil {
		err = h.fail.At(ctx, FailBeforeResponse)
	}
	if err != nil {
		p := h.errorProblem(ctx, err)
		trace.Refused(ctx, p.Status, p.Code)
		if raiseError && errors.Is(err, ErrSimulated) {
			// The failure the request asked for: a retry asks for it
			// again and fails the same way, so the answer tells the
			// client not to retry (the completer finishes the request).
			p = problem.New(http.StatusInternalServerError, "internal_error",
				"This request asked to fail (raise_error=true), and did. Do not retry it: the same request fails the same way. "+
					"The completer finishes the ride in the background; follow it with GET /rides/{id}.")
			p.Final = true
		}
		if res.RideID != 0 {
			// The ride exists: the client can follow it by id, whatever
			// it does about this answer.
			p.With("ride_id", res.RideID)
		}
		p.Write(w)
		return
	}
	if res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeStored(w, res.Response)
}

// refuse answers a request refused before its claim with p; a request
// whose user was remembered, not looked up, is authenticated first, so
// that a token no longer valid is refused as such (user.Reauthenticate).
func refuse(ctx context.Context, w http.ResponseWriter, p *problem.Problem) {
	if user.Remembered(ctx) != nil {
		if _, ok := user.Reauthenticate(ctx); !ok {
			return
		}
	}
	p.Write(w)
}

// get serves GET /rides/{id}: a ride of the caller's. Another user's ride
// is as not found as a ride that does not exist.
func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
	if err != nil || id <= 0 {
		problem.New(http.StatusNotFound, "ride_not_found", "No ride with that id.").Write(w)
		return
	}
	ride, err := rideByID(ctx, h.pool, user.FromContext(ctx).ID, id)
	if errors.Is(err, ErrNotFound) {
		problem.New(http.StatusNotFound, "ride_not_found", fmt.Sprintf("No ride with id %d.", id)).Write(w)
		return
	}
	if err != nil {
		h.readProblem(ctx, err).Write(w)
		return
	}
	writeJSON(w, http.StatusOK, ride)
}

// List limits.
const (
	defaultListLimit = 10
	maxListLimit     = 100
)

// listQuery is what GET /rides was asked for.
type listQuery struct {
	limit         int
	startingAfter int64  // 0: from the newest ride
	status        Status // empty: any
}

// listParams are the query parameters GET /rides knows.
var listParams = []string{"limit", "starting_after", "status"}

// list serves GET /rides: the caller's rides, newest first, a page at a
// time (limit, starting_after), optionally only those with one status, in
// the shape of Stripe's list objects.
func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q, prob := parseListQuery(r.URL.RawQuery)
	if prob != nil {
		prob.Write(w)
		return
	}
	// One extra row tells whether there is another page.
	rides, err := listRides(ctx, h.pool, user.FromContext(ctx).ID, q.startingAfter, q.status, q.limit+1)
	if err != nil {
		h.readProblem(ctx, err).Write(w)
		return
	}
	hasMore := len(rides) > q.limit
	if hasMore {
		rides = rides[:q.limit]
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object":   "list",
		"url":      "/rides",
		"data":     rides,
		"has_more": hasMore,
	})
}

// parseListQuery reads GET /rides's query string strictly: a query that
// does not parse, a parameter given twice, given empty or one the
// endpoint does not know is refused, naming it, rather than dropped. A client that misspells
// starting_after should hear so, not get the first page again.
func parseListQuery(rawQuery string) (listQuery, *problem.Problem) {
	q := listQuery{limit: defaultListLimit}
	values, err := url.ParseQuery(rawQuery)
	if err != nil {
		// url.ParseQuery drops what it cannot parse (a pair separated by
		// ";", a bad %-escape) and reports only the first such error.
		return q, problem.New(http.StatusBadRequest, "invalid_query",
			"The query string is malformed: "+clip(err.Error())+". Separate parameters with &.")
	}
	names := slices.Sorted(maps.Keys(values))
	for _, name := range names {
		switch {
		case !slices.Contains(listParams, name):
			return q, invalidQuery(clip(name), "is not a known query parameter (known: "+strings.Join(listParams, ", ")+")")
		case len(values[name]) > 1:
			return q, invalidQuery(name, "is given more than once")
		case values[name][0] == "":
			// ?status= is no status, not every status: refused like
			// any other value that is none of the known ones.
			return q, invalidQuery(name, "is empty; give it a value or leave it out")
		}
	}
	if v := values.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			return q, invalidQuery("limit", fmt.Sprintf("must be an integer between 1 and %d", maxListLimit))
		}
		q.limit = n
	}
	if v := values.Get("starting_after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return q, invalidQuery("starting_after", "must be a ride id")
		}
		q.startingAfter = n
	}
	if v := values.Get("status"); v != "" {
		if !slices.Contains(Statuses, Status(v)) {
			known := make([]string, len(Statuses))
			for i, st := range Statuses {
				known[i] = string(st)
			}
			return q, invalidQuery("status", fmt.Sprintf("must be one of %s; %q is not a ride status",
				strings.Join(known, ", "), clip(v)))
		}
		q.status = Status(v)
	}
	return q, nil
}

// maxEchoed bounds how much of a client's string a problem repeats back.
const maxEchoed = 64

// clip shortens s, a string the client chose, to what a problem document
// may repeat back to it.
func clip(s string) string {
	if len(s) <= maxEchoed {
		return s
	}
	return strings.ToValidUTF8(s[:maxEchoed], "") + "…"
}

// idempotencyKey validates the Idempotency-Key header. A value sent as an
// RFC 8941 structured-field string ("...") is unquoted first, as the IETF
// Idempotency-Key draft specifies.
func idempotencyKey(values []string) (string, *problem.Problem) {
	if len(values) > 1 {
		return "", problem.New(http.StatusBadRequest, "idempotency_key_invalid",
			"Send the Idempotency-Key header once.")
	}
	key := ""
	if len(values) == 1 {
		// HTTP allows only spaces and tabs around a field value
		// (RFC 9110); other Unicode space is part of the key, and then
		// not printable ASCII.
		key = strings.Trim(values[0], " \t")
	}
	if key == "" {
		return "", problem.New(http.StatusBadRequest, "idempotency_key_missing",
			"The Idempotency-Key header is required; send a random value such as a UUID, the same on every retry.")
	}
	if strings.HasPrefix(key, `"`) {
		unquoted, ok := unquoteStructuredString(key)
		if !ok {
			return "", problem.New(http.StatusBadRequest, "idempotency_key_invalid",
				"The Idempotency-Key header is not a valid quoted string.")
		}
		key = unquoted
	}
	if len(key) < MinKeyLength || len(key) > MaxKeyLength {
		return "", problem.New(http.StatusBadRequest, "idempotency_key_invalid",
			fmt.Sprintf("The Idempotency-Key header must be %d to %d characters long; it is %d.", MinKeyLength, MaxKeyLength, len(key)))
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return "", problem.New(http.StatusBadRequest, "idempotency_key_invalid",
				"The Idempotency-Key header must be printable ASCII.")
		}
	}
	return key, nil
}

// unquoteStructuredString decodes an RFC 8941 sf-string: "..." where only
// \" and \\ are escapes.
func unquoteStructuredString(s string) (string, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", false
	}
	var b strings.Builder
	for i := 1; i < len(s)-1; i++ {
		c := s[i]
		switch c {
		case '\\':
			i++
			if i >= len(s)-1 || (s[i] != '"' && s[i] != '\\') {
				return "", false
			}
			b.WriteByte(s[i])
		case '"':
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

// bodyProblem turns a body or parameter error into its 4xx.
func bodyProblem(err error) *problem.Problem {
	var (
		maxBytes  *http.MaxBytesError
		malformed *MalformedError
		params    *ParamError
	)
	switch {
	case errors.As(err, &maxBytes):
		return problem.New(http.StatusRequestEntityTooLarge, "body_too_large",
			fmt.Sprintf("The request body is larger than %d bytes.", maxBytes.Limit))
	case errors.Is(err, ErrUnsupportedMediaType):
		return problem.New(http.StatusUnsupportedMediaType, "unsupported_media_type", err.Error())
	case errors.As(err, &malformed):
		return problem.New(http.StatusBadRequest, "malformed_body", malformed.Error())
	case errors.As(err, &params):
		p := problem.New(http.StatusUnprocessableEntity, "invalid_params", params.Error())
		for _, ip := range params.Params {
			p.InvalidParams = append(p.InvalidParams, problem.InvalidParam{Name: ip.Name, Reason: ip.Reason})
		}
		return p
	default:
		return problem.New(http.StatusBadRequest, "malformed_body", "The request body could not be read.")
	}
}

func invalidQuery(name, reason string) *problem.Problem {
	p := problem.New(http.StatusBadRequest, "invalid_query", name+" "+reason)
	p.InvalidParams = []problem.InvalidParam{{Name: name, Reason: reason}}
	return p
}

// errorProblem turns a failure of the ride request into its response.
// None of these is stored on the key: the key is unlocked at its last
// recovery point, and a retry continues from there.
func (h *Handler) errorProblem(ctx context.Context, err error) *problem.Problem {
	var (
		expired *idem.ExpiredError
		limited *ratelimit.Exceeded
	)
	switch {
	case errors.As(err, &expired):
		return expiredProblem(expired)
	case errors.As(err, &limited):
		// The charge cap: nothing was done, and the key is gone.
		return limited.Problem()
	case errors.Is(err, idem.ErrKeyReused):
		return problem.New(http.StatusUnprocessableEntity, "idempotency_key_reused",
			"This Idempotency-Key was used for a different request (method, path or parameters). Use a new key for a new request.")
	case errors.Is(err, idem.ErrInFlight):
		return problem.New(http.StatusConflict, "request_in_progress",
			"Another request with this Idempotency-Key is in progress. Retry shortly with the same key.").WithRetryAfter(1)
	case errors.Is(err, idem.ErrLockLost):
		return problem.New(http.StatusConflict, "request_taken_over",
			"This request stalled and a retry took it over. Retry with the same key to get its result.").WithRetryAfter(1)
	case errors.Is(err, payment.ErrUnavailable):
		h.logger.WarnContext(ctx, "Payment provider unavailable; key left resumable", slog.Any("error", err))
		return problem.New(http.StatusServiceUnavailable, "payment_unavailable",
			"The payment provider could not be reached. Retry with the same Idempotency-Key; you will be charged at most once.").WithRetryAfter(2)
	case errors.Is(err, idem.ErrNeedsAttention):
		return problem.New(http.StatusBadGateway, "payment_needs_review",
			"We could not confirm the outcome of your payment. It has been set aside for review; you will not be charged twice. Contact support with this Idempotency-Key.")
	case errors.Is(err, idem.ErrContention):
		return problem.New(http.StatusServiceUnavailable, "database_contention",
			"The request conflicted with concurrent work. Retry with the same Idempotency-Key.").WithRetryAfter(1)
	case (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) && ctx.Err() != nil:
		// The request's own context ended. A deadline of the server's own
		// (a claim or a phase the database never answered) is a fault on
		// our side, below.
		h.logger.WarnContext(ctx, "Ride request abandoned by its client; key left resumable", slog.Any("error", err))
		return problem.New(http.StatusServiceUnavailable, "request_cancelled",
			"The request was cancelled. Retry with the same Idempotency-Key.").WithRetryAfter(1)
	default:
		h.logger.ErrorContext(ctx, "Ride request failed; key left resumable", slog.Any("error", err))
		return problem.New(http.StatusInternalServerError, "internal_error",
			"Something went wrong on our side. Retry with the same Idempotency-Key; the request resumes where it stopped.")
	}
}

// expiredProblem answers a request that came back with a key the reaper
// had deleted: the request ran when the key was first used and is not run
// again, whatever became of it. The client learns the ride, if there is
// one, and looks it up instead.
func expiredProblem(e *idem.ExpiredError) *problem.Problem {
	first := e.CreatedAt.UTC().Format(time.RFC3339)
	var outcome string
	switch {
	case e.ResourceID == nil:
		outcome = "Its request never created a ride, and nothing was charged."
	case e.ResponseCode == nil:
		outcome = fmt.Sprintf("Its request created ride %d and never finished; GET /rides/%d for its status.", *e.ResourceID, *e.ResourceID)
	default:
		outcome = fmt.Sprintf("Its request created ride %d (answered %d); GET /rides/%d for its status.", *e.ResourceID, *e.ResponseCode, *e.ResourceID)
	}
	p := problem.New(http.StatusGone, "idempotency_key_expired",
		"This Idempotency-Key was first used at "+first+" and has outlived its lifetime; its request is not run again. "+
			outcome+" Use a new key for a new ride.")
	if e.ResourceID != nil {
		p.With("ride_id", *e.ResourceID)
	}
	return p
}

// readProblem turns a failure to read rides (GET) into its response. A
// read changes nothing, so there is nothing to resume: the client asks
// again.
func (h *Handler) readProblem(ctx context.Context, err error) *problem.Problem {
	h.logger.ErrorContext(ctx, "Reading rides failed", slog.Any("error", err))
	return problem.New(http.StatusInternalServerError, "internal_error",
		"Something went wrong on our side while reading rides. Nothing was changed; try again shortly.")
}

// writeStored sends a key's stored response.
func writeStored(w http.ResponseWriter, resp idem.Response) {
	if resp.Code >= 400 {
		w.Header().Set("Content-Type", problem.ContentType)
		// A stored error is replayed byte for byte on every retry.
		w.Header().Set(problem.ShouldRetryHeader, "false")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(resp.Code)
	_, _ = w.Write(resp.Body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		problem.New(http.StatusInternalServerError, "internal_error", "Could not encode the response.").Write(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// ClientIP is the address the request came from. Forwarding headers are
// not trusted: anyone can send them.
func ClientIP(r *http.Request) netip.Addr {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap()
	}
	if a, err := netip.ParseAddr(r.RemoteAddr); err == nil {
		return a.Unmap()
	}
	return netip.IPv4Unspecified()
}
