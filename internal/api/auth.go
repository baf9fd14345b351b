package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketrides/rocketrides/internal/platform/logctx"
	"github.com/rocketrides/rocketrides/internal/platform/problem"
	"github.com/rocketrides/rocketrides/internal/ratelimit"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/user"
)

// authenticate resolves "Authorization: Bearer <token>" to a user, or,
// for a claim, serves the user remembered for the token (remember.go).
// With limits on, it refuses first (429) an address over its failed
// authentications and a token over its requests: what the limits need of
// Postgres, when they need anything, goes in the round trip that looks
// the token up (lookUp), and every 401 is counted against the address
// (ratelimit.Limiter.Failed).
func authenticate(pool *pgxpool.Pool, limits *ratelimit.Limiter, logger *slog.Logger) func(http.Handler) http.Handler {
	remembered := &rememberedUsers{users: map[string]user.User{}}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token, why := bearerToken(r)
			var hash []byte
			if why == "" {
				hash = user.HashToken(token)
			}
			claim := claims(r)
			if !limits.On() {
				if why != "" {
					unauthorized(w, why)
					return
				}
				if u, ok := remembered.recall(hash); ok && claim {
					remembered.serve(w, r, next, pool, logger, hash, u, func(w http.ResponseWriter, _ *http.Request) {
						unauthorized(w, badToken)
					})
					return
				}
				u, err := user.ByToken(r.Context(), pool, hash)
				if err == nil && claim {
					remembered.remember(hash, u)
				}
				serveAs(w, r, next, logger, u, err)
				return
			}
			addr := rides.ClientIP(r)
			if refused := limits.Known(hash, addr); refused != nil {
				refused.Problem().Write(w)
				return
			}
			if why != "" {
				failed(w, r, limits, logger, addr, why)
				return
			}
			check := limits.Count(hash, addr)
			if u, ok := remembered.recall(hash); ok && claim && !check.Needs() {
				// Decided in memory: the token was valid when remembered,
				// and the claim checks it still is.
				if refused := check.Refusal(true); refused != nil {
					refused.Problem().Write(w)
					return
				}
				remembered.serve(w, r, next, pool, logger, hash, u, func(w http.ResponseWriter, r *http.Request) {
					failed(w, r, limits, logger, addr, badToken)
				})
				return
			}
			lookup, err := lookUp(r.Context(), pool, hash, check)
			if err != nil {
				check.Unsent()
				serveAs(w, r, next, logger, user.User{}, err)
				return
			}
			if refused := check.Refusal(lookup.Found); refused != nil {
				refused.Problem().Write(w)
				return
			}
			if !lookup.Found {
				failed(w, r, limits, logger, addr, badToken)
				return
			}
			if claim {
				remembered.remember(hash, lookup.User)
			}
			serveAs(w, r, next, logger, lookup.User, nil)
		})
	}
}

// lookUp looks the token of tokenHash up, with what check needs of
// Postgres in the same round trip when it needs anything (most requests
// need nothing, and send the look-up alone, as without limits).
func lookUp(ctx context.Context, pool *pgxpool.Pool, tokenHash []byte, check *ratelimit.Check) (*user.Lookup, error) {
	if !check.Needs() {
		u, err := user.ByToken(ctx, pool, tokenHash)
		if errors.Is(err, user.ErrNotFound) {
			return &user.Lookup{}, nil
		}
		return &user.Lookup{User: u, Found: err == nil}, err
	}
	b := &pgx.Batch{}
	lookup := user.QueueByToken(b, tokenHash)
	check.Queue(b)
	return lookup, pool.SendBatch(ctx, b).Close()
}

// badToken is the 401's detail for a token no user has.
const badToken = "The API token is not valid."

// bearerToken is the request's bearer token, or, when it has none, why
// not: the 401's detail.
func bearerToken(r *http.Request) (token, why string) {
	// Two credentials are none: which one a proxy or a framework
	// would pick differs, so none is picked here.
	if len(r.Header.Values("Authorization")) > 1 {
		return "", "Send the Authorization header once."
	}
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", "Send your API token as Authorization: Bearer <token>."
	}
	return token, ""
}

// serveAs serves r as u, the user its token belongs to, or answers the
// failure to find one: 401 for a token no user has, 503 when the look-up
// itself failed.
func serveAs(w http.ResponseWriter, r *http.Request, next http.Handler, logger *slog.Logger, u user.User, err error) {
	switch {
	case errors.Is(err, user.ErrNotFound):
		unauthorized(w, badToken)
		return
	case err != nil:
		logger.ErrorContext(r.Context(), "Check API token", slog.Any("error", err))
		problem.New(http.StatusServiceUnavailable, "unavailable",
			"Could not check the API token; retry shortly.").WithRetryAfter(1).Write(w)
		return
	}
	logctx.Set(r.Context(), slog.Int64(logctx.UserID, u.ID))
	next.ServeHTTP(w, r.WithContext(user.NewContext(r.Context(), u)))
}

// failed answers a failed authentication from addr: 401 with why, or 429
// once the address has failed more often than its limit allows. A count
// that cannot be made is logged, and the answer stays 401.
func failed(w http.ResponseWriter, r *http.Request, limits *ratelimit.Limiter, logger *slog.Logger, addr netip.Addr, why string) {
	refused, err := limits.Failed(r.Context(), addr)
	if err != nil {
		logger.ErrorContext(r.Context(), "Count failed authentication", slog.Any("error", err))
	}
	if refused != nil {
		refused.Problem().Write(w)
		return
	}
	unauthorized(w, why)
}

func unauthorized(w http.ResponseWriter, detail string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="rocketrides"`)
	problem.New(http.StatusUnauthorized, "unauthorized", detail).Write(w)
}
