package ratelimit

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketrides/rocketrides/internal/platform/problem"
)

// The policies' names, as the RateLimit header fields and the rows of
// rate_limit_windows give them.
const (
	TokenPolicy      = "token"
	FailedAuthPolicy = "failed_auth"
	ChargesPolicy    = "charges"
)

// Policy is one limit: at most Quota hits per Window for each subject.
type Policy struct {
	// Name names the policy in the RateLimit header fields.
	Name string
	// Quota is the hits a window allows; 0 turns the limit off.
	Quota int
	// Window is how long a window lasts, in whole seconds.
	Window time.Duration
}

// On reports whether the limit applies.
func (p Policy) On() bool { return p.Quota > 0 }

// seconds is the window in seconds, as the header fields and the SQL take
// it.
func (p Policy) seconds() int { return int(p.Window / time.Second) }

var policyName = regexp.MustCompile(`^[a-z][a-z_]{0,29}$`)

func (p Policy) validate(field string) error {
	switch {
	case !p.On():
		return nil
	case !policyName.MatchString(p.Name):
		return fmt.Errorf("ratelimit: %s.Name must be lowercase letters and '_' (at most 30), got %q", field, p.Name)
	case p.Window < MinWindow || p.Window%time.Second != 0:
		return fmt.Errorf("ratelimit: %s.Window must be whole seconds, at least one, got %s", field, p.Window)
	}
	return nil
}

// Config configures the limits the api applies at its edge. Pool is
// required; a policy with a zero Quota is off.
type Config struct {
	// Pool is the database holding rate_limit_windows. Required.
	Pool *pgxpool.Pool
	// Token limits each API token's requests.
	Token Policy
	// FailedAuth limits each client address's failed authentications.
	FailedAuth Policy
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now is this instance's clock, by which it counts SyncEvery and the
	// end of each window it remembers; time.Now when nil. Postgres keeps
	// the windows themselves by its own. A test sets a clock it moves,
	// so that which requests sync, and which refusals an instance still
	// remembers, do not depend on the test's pace.
	Now func() time.Time
}

func (c *Config) validate() error {
	if c.Pool == nil {
		return errors.New("ratelimit: Config.Pool is required")
	}
	return errors.Join(c.Token.validate("Config.Token"), c.FailedAuth.validate("Config.FailedAuth"))
}

// Limiter applies the limits of the api's edge: requests per API token
// and failed authentications per client address. A nil *Limiter applies
// none.
type Limiter struct {
	pool       *pgxpool.Pool
	token      Policy
	failedAuth Policy
	logger     *slog.Logger
	now        func() time.Time
	// This instance's view of the shared counts (view.go).
	tokens, addresses *view
}

// New returns a Limiter for config.
func New(config *Config) (*Limiter, error) {
	if config == nil {
		return nil, errors.New("ratelimit: Config is required (Pool)")
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	now := config.Now
	if now == nil {
		now = time.Now
	}
	return &Limiter{
		pool:       config.Pool,
		token:      config.Token,
		failedAuth: config.FailedAuth,
		logger:     cmp.Or(config.Logger, slog.Default()),
		now:        now,
		tokens:     newView(config.Token, maxSubjects),
		addresses:  newView(config.FailedAuth, maxSubjects),
	}, nil
}

// On reports whether l applies any limit at all.
func (l *Limiter) On() bool { return l != nil && (l.token.On() || l.failedAuth.On()) }

// hitSQL adds $4 hits to the count of subject ($2) under policy ($1), in
// the window that is running, or in a new one of $3 seconds if none is,
// and answers the window's hits and the seconds until it ends.
const hitSQL = `
	INSERT INTO rate_limit_windows AS w (policy, subject, hits, ends_at)
	VALUES ($1, $2, $4, now() + make_interval(secs => $3::int))
	ON CONFLICT (policy, subject) DO UPDATE
	SET hits    = CASE WHEN w.ends_at > now() THEN w.hits + excluded.hits ELSE excluded.hits END,
	    ends_at = CASE WHEN w.ends_at > now() THEN w.ends_at ELSE excluded.ends_at END
	RETURNING hits, ceil(extract(epoch FROM ends_at - now()))::int AS retry_after`

// readSQL reads the hits of subject ($2) under policy ($1) in its running
// window, and the seconds until that ends; no row when none runs.
const readSQL = `
	SELECT hits, ceil(extract(epoch FROM ends_at - now()))::int AS retry_after
	FROM rate_limit_windows
	WHERE policy = $1 AND subject = $2 AND ends_at > now()`

// window is a subject's running window as hitSQL and readSQL answer it.
type window struct {
	Hits       int64 `db:"hits"`
	RetryAfter int   `db:"retry_after"`
}

// queueWindow queues sql on b; once b is sent, *w is the window it
// answered, or stays zero when it answered none.
func queueWindow(b *pgx.Batch, w *window, sql string, args ...any) {
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		windows, err := pgx.CollectRows(rows, pgx.RowToStructByName[window])
		if err != nil {
			return fmt.Errorf("rate limit %s: %w", args[0], err)
		}
		if len(windows) == 1 {
			*w = windows[0]
		}
		return nil
	})
}

// tokenSubject is what the token limit counts for: the token's SHA-256
// (user.HashToken), in hex.
func tokenSubject(tokenHash []byte) string { return hex.EncodeToString(tokenHash) }

// AddressSubject is what a limit per client address counts for: an IPv4
// address, or an IPv6 address's /64, the block one host or one customer's
// line gets whole, and "unknown" for a request without an address (a Unix
// socket). The console's login throttle counts by it too.
func AddressSubject(addr netip.Addr) string {
	addr = addr.Unmap()
	switch {
	case !addr.IsValid():
		return "unknown"
	case addr.Is6():
		p, _ := addr.Prefix(64) // never fails for an IPv6 address
		return p.String()
	}
	return addr.String()
}

// Known returns the refusal this instance already knows a request with
// tokenHash (nil when it sent none) from addr meets, without asking
// Postgres, or nil.
func (l *Limiter) Known(tokenHash []byte, addr netip.Addr) *Exceeded {
	if !l.On() {
		return nil
	}
	now := l.now()
	if l.failedAuth.On() {
		if e := l.addresses.refusal(AddressSubject(addr), now, l.failedAuthOver); e != nil {
			return e
		}
	}
	if l.token.On() && tokenHash != nil {
		return l.tokens.refusal(tokenSubject(tokenHash), now, l.tokenOver)
	}
	return nil
}

// tokenOver is whether a token's count refuses its request: past the
// quota.
func (l *Limiter) tokenOver(hits int64) bool { return hits > int64(l.token.Quota) }

// failedAuthOver is whether an address's failures refuse its requests:
// at the quota, the last failure it allows made.
func (l *Limiter) failedAuthOver(hits int64) bool { return hits >= int64(l.failedAuth.Quota) }

// Check is a request's limits: Count counts the request, Queue queues
// what they need of Postgres on the batch that looks its token up, and
// Refusal reads them once it is sent.
type Check struct {
	l                      *Limiter
	now                    time.Time
	tokenSubject, address  string
	sent                   int64 // hits to add to the token's count with the batch
	read                   bool  // the address's failures to read with the batch
	tokenWindow, addWindow window
}

// Count counts a request with tokenHash from addr, and finds what its
// limits need of Postgres, most often nothing (view.go): the token's hits
// since its last sync, and a read of the address's failures when this
// instance's copy is older than SyncEvery.
func (l *Limiter) Count(tokenHash []byte, addr netip.Addr) *Check {
	if !l.On() {
		return nil
	}
	c := &Check{l: l, now: l.now()}
	if l.token.On() {
		c.tokenSubject = tokenSubject(tokenHash)
		c.sent = l.tokens.hit(c.tokenSubject, c.now)
	}
	if l.failedAuth.On() {
		c.address = AddressSubject(addr)
		c.read = l.addresses.stale(c.address, c.now)
	}
	return c
}

// Needs reports whether the request's limits need anything of Postgres.
func (c *Check) Needs() bool { return c != nil && (c.sent > 0 || c.read) }

// Queue queues on b what the request's limits need of Postgres. The
// caller sends b with its own look-up of the token, in one round trip,
// then asks the Check for its Refusal.
func (c *Check) Queue(b *pgx.Batch) {
	if c == nil {
		return
	}
	l := c.l
	if c.sent > 0 {
		queueWindow(b, &c.tokenWindow, hitSQL, l.token.Name, c.tokenSubject, l.token.seconds(), c.sent)
	}
	if c.read {
		queueWindow(b, &c.addWindow, readSQL, l.failedAuth.Name, c.address)
	}
}

// Unsent gives the request's hits back to this instance's count when its
// batch failed, for the next sync to add.
func (c *Check) Unsent() {
	if c != nil && c.sent > 0 {
		c.l.tokens.unsent(c.tokenSubject, c.sent, c.now)
	}
}

// Refusal is the refusal the request meets once its batch is sent, or
// nil: its address's failures first, then, for a token that authenticated
// (an unknown token's count means nothing), its token's requests.
func (c *Check) Refusal(authenticated bool) *Exceeded {
	if c == nil {
		return nil
	}
	l := c.l
	// What Postgres just answered decides; without an answer, the view.
	var address, token *Exceeded
	switch {
	case c.read:
		address = l.addresses.synced(c.address, c.addWindow, c.now, l.failedAuthOver)
	case l.failedAuth.On():
		address = l.addresses.refusal(c.address, c.now, l.failedAuthOver)
	}
	switch {
	case c.sent > 0:
		token = l.tokens.synced(c.tokenSubject, c.tokenWindow, c.now, l.tokenOver)
	case l.token.On():
		token = l.tokens.refusal(c.tokenSubject, c.now, l.tokenOver)
	}
	if address != nil {
		return address
	}
	if authenticated {
		return token
	}
	return nil
}

// Failed counts a failed authentication from addr, in Postgres at once:
// the failures an address is answered 401 for are counted exactly. It
// returns the refusal the failure meets when it is one more than the
// quota allows (answered 429 instead of 401), or nil.
func (l *Limiter) Failed(ctx context.Context, addr netip.Addr) (*Exceeded, error) {
	if l == nil || !l.failedAuth.On() {
		return nil, nil
	}
	subject := AddressSubject(addr)
	rows, err := l.pool.Query(ctx, hitSQL, l.failedAuth.Name, subject, l.failedAuth.seconds(), 1)
	if err != nil {
		return nil, fmt.Errorf("count failed authentication: %w", err)
	}
	w, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[window])
	if err != nil {
		return nil, fmt.Errorf("count failed authentication: %w", err)
	}
	now := l.now()
	// From the quota on, the view refuses the address's requests.
	_ = l.addresses.synced(subject, w, now, l.failedAuthOver) // the refusal is decided below
	if w.Hits == int64(l.failedAuth.Quota) {
		// Once a window: the count is exact, and this is the failure that
		// reached it.
		l.logger.WarnContext(ctx, "Refusing an address after its failed authentications",
			slog.String("address", subject), slog.Int64("failures", w.Hits), slog.Int("retry_after", w.RetryAfter))
	}
	if w.Hits > int64(l.failedAuth.Quota) {
		return &Exceeded{Policy: l.failedAuth, RetryAfter: max(w.RetryAfter, 1)}, nil
	}
	return nil, nil
}

// Exceeded is a refusal: Policy's quota is used up, for RetryAfter more
// seconds.
type Exceeded struct {
	Policy     Policy
	RetryAfter int
}

func (e *Exceeded) Error() string {
	return fmt.Sprintf("rate limit %s reached (%d per %s); retry after %ds",
		e.Policy.Name, e.Policy.Quota, e.Policy.Window, e.RetryAfter)
}

// Problem is the refusal's answer: 429 rate_limited, with Retry-After and
// the draft's RateLimit-Policy (the policy's name, quota and window in
// seconds) and RateLimit (its name, the quota left, which is none, and
// the seconds until the window ends and the quota is whole again):
//
//	RateLimit-Policy: "token";q=600;w=60
//	RateLimit: "token";r=0;t=12
//	Retry-After: 12
//
// Retry-After equals t: the draft asks that it not point before the end
// of the window.
func (e *Exceeded) Problem() *problem.Problem {
	p := e.Policy
	var detail string
	switch p.Name {
	case TokenPolicy:
		detail = fmt.Sprintf("Too many requests with this API token: %d are allowed every %d seconds. Nothing was done; retry after Retry-After seconds (with the same Idempotency-Key).",
			p.Quota, p.seconds())
	case FailedAuthPolicy:
		detail = fmt.Sprintf("Too many failed authentications from this address: %d are allowed every %d seconds, and then no request is authenticated from it until Retry-After seconds have passed. Nothing was done.",
			p.Quota, p.seconds())
	case ChargesPolicy:
		detail = fmt.Sprintf("Too many charges for this user: %d rides are allowed in any %d seconds. Nothing was done and nothing is stored on the key: retry with the same Idempotency-Key after Retry-After seconds.",
			p.Quota, p.seconds())
	default:
		detail = fmt.Sprintf("Rate limit %s reached: %d are allowed every %d seconds. Nothing was done; retry after Retry-After seconds.",
			p.Name, p.Quota, p.seconds())
	}
	prob := problem.New(http.StatusTooManyRequests, "rate_limited", detail).WithRetryAfter(e.RetryAfter)
	prob.Header = http.Header{}
	prob.Header.Set("RateLimit-Policy", strconv.Quote(p.Name)+";q="+strconv.Itoa(p.Quota)+";w="+strconv.Itoa(p.seconds()))
	prob.Header.Set("RateLimit", strconv.Quote(p.Name)+";r=0;t="+strconv.Itoa(e.RetryAfter))
	return prob
}
