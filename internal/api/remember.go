package api

import (
	"errors"
	"log/slog"
	"net/http"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketrides/rocketrides/internal/platform/logctx"
	"github.com/rocketrides/rocketrides/internal/user"
)

// A request that makes an idempotency claim (a POST with an
// Idempotency-Key) is served as the user its token was found to belong to
// the last time, without a look-up of its own: the claim checks, in its
// own round trip and ahead of itself, that the user still holds the token
// as remembered (user.HoldsToken), and a request whose check fails is
// authenticated afresh. A new ride saves a round trip, and a replay is
// one. With the rate limits on, a request is served so only when its
// limits need nothing of Postgres either (ratelimit.Check.Needs): most
// do, as the limits count in memory between syncs; the others look their
// token up in the round trip that takes their counts, and the user found
// is remembered.

// maxRemembered bounds the users remembered: past it, all are forgotten
// and remembered again as requests come.
const maxRemembered = 10_000

// rememberedUsers is the user each token was found to belong to, by the
// token's hash.
type rememberedUsers struct {
	mu    sync.Mutex
	users map[string]user.User
}

// claims reports whether r makes an idempotency claim, which checks a
// remembered user (see above).
func claims(r *http.Request) bool {
	return r.Method == http.MethodPost && r.Header.Get("Idempotency-Key") != ""
}

// recall is the user remembered for the token of hash, if any.
func (m *rememberedUsers) recall(hash []byte) (user.User, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.users[string(hash)]
	return u, ok
}

// serve serves r, a claim, as u, the user remembered for the token of hash.
// Should the claim's check fail, the user is forgotten and the token
// looked up as though it had never been remembered; unknown answers a
// token that no user has then.
func (m *rememberedUsers) serve(w http.ResponseWriter, r *http.Request, next http.Handler, pool *pgxpool.Pool,
	logger *slog.Logger, hash []byte, u user.User, unknown http.HandlerFunc) {
	reauthenticate := func() (user.User, bool) {
		m.forget(hash)
		u, err := user.ByToken(r.Context(), pool, hash)
		switch {
		case errors.Is(err, user.ErrNotFound):
			unknown(w, r)
			return user.User{}, false
		case err != nil:
			serveAs(w, r, nil, logger, u, err)
			return user.User{}, false
		}
		m.remember(hash, u)
		logctx.Set(r.Context(), slog.Int64(logctx.UserID, u.ID))
		return u, true
	}
	logctx.Set(r.Context(), slog.Int64(logctx.UserID, u.ID))
	next.ServeHTTP(w, r.WithContext(user.NewRememberedContext(r.Context(), u, hash, reauthenticate)))
}

func (m *rememberedUsers) remember(hash []byte, u user.User) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.users) >= maxRemembered {
		clear(m.users)
	}
	m.users[string(hash)] = u
}

func (m *rememberedUsers) forget(hash []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.users, string(hash))
}
