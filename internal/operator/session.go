package operator

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rocketrides/rocketrides/internal/ratelimit"
)

// Errors of a login and of a session.
var (
	// ErrRefused: the name has no account, the password is wrong, or the
	// account is disabled. The error's text says which, for the log; the
	// person at the form is told none of it.
	ErrRefused = errors.New("login refused")
	// ErrThrottled: too many logins at the account, or from the address,
	// failed of late; ThrottledError says how long to wait.
	ErrThrottled = errors.New("too many failed logins")
	// ErrNoSession: the token names no session that is still on: it
	// expired, was ended (logout, the account disabled or its password
	// reset), or never was.
	ErrNoSession = errors.New("no such session")
)

// ThrottledError is Login's refusal while a wait is on: RetryAfter is how
// long until the next attempt is taken, Scope whose count it is
// ("account" or "address").
type ThrottledError struct {
	Scope      string
	RetryAfter time.Duration
}

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("%s: too many failed logins at this %s; retry after %s", ErrThrottled, e.Scope, e.RetryAfter)
}

func (e *ThrottledError) Unwrap() error { return ErrThrottled }

// Session is an operator logged in.
type Session struct {
	OperatorID int64
	// Operator is the account's name, what audit records carry.
	Operator string
	Expires  time.Time
	// secret is the session's own key (operator_sessions.secret).
	secret []byte
}

// Sign returns a signature of payload by the session's own key: the
// console's form token, and the messages it shows only to the session it
// said them to. Another session, or someone without the session's page,
// cannot make one.
func (s *Session) Sign(payload string) string {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Login checks name's password and, when it is right, starts a session
// and returns it with its token, for the cookie. Before the password is
// checked, the attempt is counted against the address from and the
// account name (throttle.go); while either must wait, Login refuses with
// a ThrottledError without checking anything. A wrong name, a wrong
// password and a disabled account are all ErrRefused, and take as long.
func (s *Store) Login(ctx context.Context, name, password string, from netip.Addr) (*Session, string, error) {
	// No account can have such a name: nothing to guess, nothing to count.
	if err := CheckName(name); err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrRefused, err)
	}
	address := ratelimit.AddressSubject(from)
	if err := s.take(ctx, scopeAddress, address); err != nil {
		return nil, "", err
	}
	// An attempt at an account that must wait still counts against the
	// address it came from: one address cannot try many accounts at the
	// pace the accounts allow each.
	if err := s.take(ctx, scopeAccount, name); err != nil {
		return nil, "", err
	}

	var (
		account  Operator
		hash     string
		disabled bool
	)
	err := s.pool.QueryRow(ctx, `SELECT id, name, password_hash, disabled_at IS NOT NULL FROM operators WHERE name = $1`, name).
		Scan(&account.ID, &account.Name, &hash, &disabled)
	found := err == nil
	if !found && !errors.Is(err, pgx.ErrNoRows) {
		return nil, "", fmt.Errorf("login %q: %w", name, err)
	}
	if !found {
		hash = s.absent
	}
	ok, err := s.verify(ctx, hash, password)
	switch {
	case err != nil:
		return nil, "", fmt.Errorf("login %q: %w", name, err)
	case !found:
		return nil, "", fmt.Errorf("%w: no account is named %q", ErrRefused, name)
	case !ok:
		return nil, "", fmt.Errorf("%w: wrong password for %q", ErrRefused, name)
	case disabled:
		return nil, "", fmt.Errorf("%w: the account %q is disabled", ErrRefused, name)
	}
	if err := s.giveBack(ctx, name, address); err != nil {
		return nil, "", err
	}

	token, sum := newToken()
	secret := make([]byte, 32)
	_, _ = rand.Read(secret) // never fails (crypto/rand)
	session := &Session{OperatorID: account.ID, Operator: account.Name, secret: secret}
	// The account may have been disabled since it was read: the insert
	// takes it only if it is still enabled. Expired sessions are cleared
	// on the way.
	err = s.pool.QueryRow(ctx, `
		WITH expired AS (
			DELETE FROM operator_sessions WHERE expires_at <= now()
		)
		INSERT INTO operator_sessions (token_sha256, operator_id, secret, expires_at)
		SELECT $1, id, $2, now() + make_interval(secs => $3)
		FROM operators WHERE id = $4 AND disabled_at IS NULL
		RETURNING expires_at`, sum, secret, s.lifetime.Seconds(), account.ID).Scan(&session.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", fmt.Errorf("%w: the account %q was disabled as it logged in", ErrRefused, name)
	}
	if err != nil {
		return nil, "", fmt.Errorf("start a session for %q: %w", name, err)
	}
	return session, token, nil
}

// Session returns the session token names, or ErrNoSession. It is asked
// on every request, so that a session ended anywhere ends everywhere at
// once.
func (s *Store) Session(ctx context.Context, token string) (*Session, error) {
	sum, ok := tokenSum(token)
	if !ok {
		return nil, ErrNoSession
	}
	session := &Session{}
	err := s.pool.QueryRow(ctx, `
		SELECT o.id, o.name, s.secret, s.expires_at
		FROM operator_sessions s JOIN operators o ON o.id = s.operator_id
		WHERE s.token_sha256 = $1 AND s.expires_at > now() AND o.disabled_at IS NULL`, sum).
		Scan(&session.OperatorID, &session.Operator, &session.secret, &session.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNoSession
	}
	if err != nil {
		return nil, fmt.Errorf("find session: %w", err)
	}
	return session, nil
}

// Logout ends the session token names, if it is on.
func (s *Store) Logout(ctx context.Context, token string) error {
	sum, ok := tokenSum(token)
	if !ok {
		return nil
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM operator_sessions WHERE token_sha256 = $1`, sum); err != nil {
		return fmt.Errorf("end session: %w", err)
	}
	return nil
}

// tokenLen is the length of a token: 32 random bytes, base64url.
var tokenLen = base64.RawURLEncoding.EncodedLen(32)

// newToken returns a new session token and its SHA-256, the form the
// table keeps.
func newToken() (string, []byte) {
	raw := make([]byte, 32)
	_, _ = rand.Read(raw) // never fails (crypto/rand)
	token := base64.RawURLEncoding.EncodeToString(raw)
	sum, _ := tokenSum(token)
	return token, sum
}

// tokenSum is token's SHA-256, or false when token cannot be one of ours:
// a malformed cookie costs no query.
func tokenSum(token string) ([]byte, bool) {
	if len(token) != tokenLen {
		return nil, false
	}
	if _, err := base64.RawURLEncoding.DecodeString(token); err != nil {
		return nil, false
	}
	sum := sha256.Sum256([]byte(token))
	return sum[:], true
}
