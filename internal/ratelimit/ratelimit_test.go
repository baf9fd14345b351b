package ratelimit_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/ratelimit"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/testkit/testclock"
	"github.com/rocketrides/rocketrides/internal/user"
)

func TestLimiter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	type testBundle struct {
		pool *pgxpool.Pool
		// two limiters on one database: two api instances
		a, b *ratelimit.Limiter
		// the limiters' clock: it stands still until the test moves it,
		// so that which requests sync, and which refusals a limiter still
		// remembers, do not depend on the test's pace
		clock *testclock.Clock
	}
	setup := func(t *testing.T, token, failedAuth ratelimit.Policy) *testBundle {
		t.Helper()
		pool := dbtest.New(t)
		c := testclock.New(time.Now())
		newLimiter := func() *ratelimit.Limiter {
			l, err := ratelimit.New(&ratelimit.Config{Pool: pool, Token: token, FailedAuth: failedAuth, Now: c.Now})
			require.NoError(t, err)
			return l
		}
		return &testBundle{pool: pool, a: newLimiter(), b: newLimiter(), clock: c}
	}
	// endWindows ends every running window, as time would: in Postgres,
	// which keeps the windows, and by the limiters' clock, by which they
	// remember what they saw of them.
	endWindows := func(t *testing.T, b *testBundle, window time.Duration) {
		t.Helper()
		_, err := b.pool.Exec(ctx, `UPDATE rate_limit_windows SET ends_at = now() WHERE ends_at > now()`)
		require.NoError(t, err)
		b.clock.Advance(window)
	}
	// request sends what the api sends for a request with tokenHash from
	// addr, its token found or not, and returns its refusal.
	request := func(t *testing.T, b *testBundle, l *ratelimit.Limiter, tokenHash []byte, addr netip.Addr, found bool) *ratelimit.Exceeded {
		t.Helper()
		if refused := l.Known(tokenHash, addr); refused != nil {
			return refused
		}
		check := l.Count(tokenHash, addr)
		if check.Needs() {
			batch := &pgx.Batch{}
			check.Queue(batch)
			require.NoError(t, b.pool.SendBatch(ctx, batch).Close())
		}
		return check.Refusal(found)
	}
	token := user.HashToken("tok-limiter")
	addr := netip.MustParseAddr("192.0.2.7")

	t.Run("CountsATokensRequestsOnceAcrossLimiters", func(t *testing.T) {
		t.Parallel()
		b := setup(t, ratelimit.Policy{Name: "token", Quota: 4, Window: time.Minute}, ratelimit.Policy{})
		for i := range 4 {
			require.Nil(t, request(t, b, []*ratelimit.Limiter{b.a, b.b}[i%2], token, addr, true), "request %d of 4", i+1)
		}
		refused := request(t, b, b.b, token, addr, true)
		require.NotNil(t, refused)
		require.Equal(t, "token", refused.Policy.Name)
		require.Positive(t, refused.RetryAfter)
		require.LessOrEqual(t, refused.RetryAfter, 60, "what is left of the window")
		// The other limiter finds the same count.
		require.NotNil(t, request(t, b, b.a, token, addr, true))
		// Another token's count is its own.
		require.Nil(t, request(t, b, b.a, user.HashToken("tok-other"), addr, true))
		// An unknown token's count refuses nothing: its request fails
		// authentication instead.
		require.Nil(t, request(t, b, b.a, user.HashToken("tok-unknown"), addr, false))
	})

	// Below half its quota a token's hits are added to the shared count
	// at most every SyncEvery, by the request that finds the last sync
	// that old: a replay storm on one token writes ten times a second,
	// not thousands.
	t.Run("BelowHalfTheQuotaAddsHitsEverySyncEvery", func(t *testing.T) {
		t.Parallel()
		b := setup(t, ratelimit.Policy{Name: "token", Quota: 100, Window: time.Minute}, ratelimit.Policy{})
		shared := func() (hits int64) {
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT hits FROM rate_limit_windows WHERE policy = 'token'`).Scan(&hits))
			return hits
		}
		for range 5 {
			require.Nil(t, request(t, b, b.a, token, addr, true))
		}
		require.Equal(t, int64(1), shared(), "the first request synced; the next four were counted here")
		b.clock.Advance(ratelimit.SyncEvery)
		require.Nil(t, request(t, b, b.a, token, addr, true))
		require.Equal(t, int64(6), shared(), "the next sync adds them")
	})

	t.Run("RemembersARefusalUntilItsWindowEnds", func(t *testing.T) {
		t.Parallel()
		b := setup(t, ratelimit.Policy{Name: "token", Quota: 1, Window: time.Hour}, ratelimit.Policy{})
		require.Nil(t, request(t, b, b.a, token, addr, true))
		require.NotNil(t, request(t, b, b.a, token, addr, true))
		// Known answers without Postgres, which no longer has the count.
		_, err := b.pool.Exec(ctx, `DELETE FROM rate_limit_windows`)
		require.NoError(t, err)
		refused := b.a.Known(token, addr)
		require.NotNil(t, refused)
		require.Positive(t, refused.RetryAfter)
		require.LessOrEqual(t, refused.RetryAfter, 3600)
		require.Nil(t, b.b.Known(token, addr), "an instance remembers only what it saw")
		b.clock.Advance(30 * time.Minute)
		later := b.a.Known(token, addr)
		require.NotNil(t, later)
		require.Equal(t, refused.RetryAfter-1800, later.RetryAfter, "the window ends by the instance's clock")

		b.clock.Advance(30 * time.Minute)
		require.Nil(t, b.a.Known(token, addr))
		require.Nil(t, request(t, b, b.a, token, addr, true), "a new window")
	})

	t.Run("StartsANewWindowOnceTheLastHasEnded", func(t *testing.T) {
		t.Parallel()
		b := setup(t, ratelimit.Policy{Name: "token", Quota: 2, Window: time.Hour}, ratelimit.Policy{})
		require.Nil(t, request(t, b, b.a, token, addr, true))
		require.Nil(t, request(t, b, b.b, token, addr, true))
		endWindows(t, b, time.Hour)
		require.Nil(t, request(t, b, b.a, token, addr, true))
		require.Nil(t, request(t, b, b.b, token, addr, true))
		require.NotNil(t, request(t, b, b.a, token, addr, true))
	})

	t.Run("RefusesAnAddressPastItsFailuresWhateverItsToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t, ratelimit.Policy{Name: "token", Quota: 100, Window: time.Minute},
			ratelimit.Policy{Name: "failed_auth", Quota: 3, Window: time.Minute})
		for i := range 3 {
			refused, err := []*ratelimit.Limiter{b.a, b.b}[i%2].Failed(ctx, addr)
			require.NoError(t, err)
			require.Nil(t, refused, "failure %d of 3 is answered 401", i+1)
		}
		// The limiter that counted the last failure allowed knows at
		// once; the other reads the count again within SyncEvery.
		require.NotNil(t, b.a.Known(token, addr))
		b.clock.Advance(ratelimit.SyncEvery)
		refused := request(t, b, b.b, token, addr, true)
		require.NotNil(t, refused)
		require.Equal(t, "failed_auth", refused.Policy.Name)
		// A fourth failure, on a limiter that does not know, is refused
		// itself; the third was logged, once, naming the address.
		var logs bytes.Buffer
		c, err := ratelimit.New(&ratelimit.Config{Pool: b.pool, FailedAuth: ratelimit.Policy{Name: "failed_auth", Quota: 3, Window: time.Minute},
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err)
		refused, err = c.Failed(ctx, addr)
		require.NoError(t, err)
		require.NotNil(t, refused)
		require.Empty(t, logs.String(), "past the quota: logged already")
		d := netip.MustParseAddr("192.0.2.99")
		for range 3 {
			_, err = c.Failed(ctx, d)
			require.NoError(t, err)
		}
		require.Contains(t, logs.String(), `level=WARN msg="Refusing an address after its failed authentications" address=192.0.2.99 failures=3`)
		// Another address is not refused.
		require.Nil(t, request(t, b, b.a, token, netip.MustParseAddr("192.0.2.8"), true))
	})

	t.Run("CountsAnIPv6AddressByItsSlash64", func(t *testing.T) {
		t.Parallel()
		b := setup(t, ratelimit.Policy{}, ratelimit.Policy{Name: "failed_auth", Quota: 2, Window: time.Minute})
		for _, a := range []string{"2001:db8:1:2::1", "2001:db8:1:2:ffff::9"} {
			refused, err := b.a.Failed(ctx, netip.MustParseAddr(a))
			require.NoError(t, err)
			require.Nil(t, refused)
		}
		require.NotNil(t, request(t, b, b.b, token, netip.MustParseAddr("2001:db8:1:2:abcd::1"), true), "the same /64")
		require.Nil(t, request(t, b, b.b, token, netip.MustParseAddr("2001:db8:1:3::1"), true), "another /64")
		// An IPv4 address mapped into IPv6 is the IPv4 address.
		refused, err := b.a.Failed(ctx, netip.MustParseAddr("::ffff:192.0.2.7"))
		require.NoError(t, err)
		require.Nil(t, refused)
		var subject string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT subject FROM rate_limit_windows WHERE subject LIKE '192.%'`).Scan(&subject))
		require.Equal(t, "192.0.2.7", subject)
	})

	t.Run("SweepsEndedWindows", func(t *testing.T) {
		t.Parallel()
		b := setup(t, ratelimit.Policy{Name: "token", Quota: 5, Window: time.Hour}, ratelimit.Policy{})
		require.Nil(t, request(t, b, b.a, token, addr, true))
		n, err := ratelimit.Sweep(ctx, b.pool)
		require.NoError(t, err)
		require.Zero(t, n, "a running window stays")
		endWindows(t, b, time.Hour)
		n, err = ratelimit.Sweep(ctx, b.pool)
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
	})

	t.Run("ANilLimiterLimitsNothing", func(t *testing.T) {
		t.Parallel()
		var l *ratelimit.Limiter
		require.False(t, l.On())
		require.Nil(t, l.Known(token, addr))
		require.False(t, l.Count(token, addr).Needs())
		require.Nil(t, l.Count(token, addr).Refusal(true))
		refused, err := l.Failed(ctx, addr)
		require.NoError(t, err)
		require.Nil(t, refused)
	})

	t.Run("RefusesABadPolicyByField", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.New(t)
		_, err := ratelimit.New(&ratelimit.Config{})
		require.EqualError(t, err, "ratelimit: Config.Pool is required")
		_, err = ratelimit.New(&ratelimit.Config{Pool: pool, Token: ratelimit.Policy{Name: "token", Quota: 1, Window: 1500 * time.Millisecond}})
		require.EqualError(t, err, "ratelimit: Config.Token.Window must be whole seconds, at least one, got 1.5s")
		_, err = ratelimit.New(&ratelimit.Config{Pool: pool, FailedAuth: ratelimit.Policy{Name: "Bad Name", Quota: 1, Window: time.Second}})
		require.ErrorContains(t, err, "Config.FailedAuth.Name")
		_, err = ratelimit.New(&ratelimit.Config{Pool: pool, Token: ratelimit.Policy{Window: 1500 * time.Millisecond}})
		require.NoError(t, err, "a limit that is off needs no window")
	})
}

// TestChargeGuard pins the charge cap's statement: it counts a charge,
// fails past the quota, and a refused charge is not counted.
func TestChargeGuard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	charges := ratelimit.Policy{Name: "charges", Quota: 2, Window: time.Hour}
	charge := func(userID int64) error {
		sql, args := ratelimit.ChargeGuard(charges, userID)
		_, err := pool.Exec(ctx, sql, args...)
		return err
	}
	require.NoError(t, charge(1))
	require.NoError(t, charge(1))
	err := charge(1)
	require.True(t, ratelimit.Refused(err), "%v", err)
	refused := ratelimit.ChargeRefusal(ctx, pool, charges, 1)
	require.Equal(t, charges, refused.Policy)
	require.GreaterOrEqual(t, refused.RetryAfter, 3599, "the oldest charge counts for a whole window")
	require.LessOrEqual(t, refused.RetryAfter, 3960, "and a tenth of one more at most")
	require.NoError(t, charge(2), "another user's charges are their own")

	var hits int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT hits FROM rate_limit_charges WHERE user_id = 1`).Scan(&hits))
	require.Equal(t, int64(2), hits, "the refused charge rolled back with its transaction")

	require.False(t, ratelimit.Refused(context.Canceled))
	require.Equal(t, 3960, ratelimit.ChargeRefusal(ctx, pool, charges, 99).RetryAfter, "nothing to read: the longest a charge counts")
}

// TestChargeCapSlides straddles the end of the fixed window the cap used
// to count in, which started at the user's first charge: a burst just
// before it and another just after used to pass twice the quota in half
// a second. Every charge is timed by Postgres's clock, which the cap
// counts by, and no window of the cap's length holds more than the quota.
func TestChargeCapSlides(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	const quota, window = 5, 4 * time.Second
	charges := ratelimit.Policy{Name: "charges", Quota: quota, Window: window}
	// charge counts a charge of user 1 in a transaction of its own, and
	// returns when Postgres counted it, or false when the cap refused it.
	charge := func() (time.Time, bool) {
		t.Helper()
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		sql, args := ratelimit.ChargeGuard(charges, 1)
		if _, err := tx.Exec(ctx, sql, args...); ratelimit.Refused(err) {
			return time.Time{}, false
		} else {
			require.NoError(t, err)
		}
		var at time.Time
		require.NoError(t, tx.QueryRow(ctx, `SELECT now()`).Scan(&at))
		require.NoError(t, tx.Commit(ctx))
		return at, true
	}
	// burst tries quota charges once Postgres's clock reaches from.
	var counted []time.Time
	burst := func(from time.Time) {
		t.Helper()
		for {
			var now time.Time
			require.NoError(t, pool.QueryRow(ctx, `SELECT now()`).Scan(&now))
			if !now.Before(from) {
				break
			}
			time.Sleep(now.Sub(from) / -2)
		}
		for range quota {
			if at, ok := charge(); ok {
				counted = append(counted, at)
			}
		}
	}

	first, ok := charge()
	require.True(t, ok)
	counted = append(counted, first)
	// The fixed window would have ended at first+window.
	burst(first.Add(window - 400*time.Millisecond))
	burst(first.Add(window + 100*time.Millisecond))
	for _, end := range counted {
		in := 0
		for _, at := range counted {
			if !at.Before(end.Add(-window)) && !at.After(end) {
				in++
			}
		}
		require.LessOrEqual(t, in, quota, "charges in the %s up to %s, of %v", window, end, counted)
	}

	// Refused until the oldest charge leaves the window, then not. The
	// window is filled first with whatever room it has: the charge that
	// leaves it first is then seconds away, however slow the machine
	// (the first charge could leave between the last burst and this).
	burst(time.Time{})
	_, ok = charge()
	require.False(t, ok)
	wait := ratelimit.ChargeRefusal(ctx, pool, charges, 1).RetryAfter
	require.LessOrEqual(t, wait, 5, "a window and a tenth at most")
	time.Sleep(time.Duration(wait) * time.Second)
	_, ok = charge()
	require.True(t, ok, "after Retry-After")
}

// TestExceededProblem pins a refusal's answer to the IETF httpapi draft's
// field syntax (draft-ietf-httpapi-ratelimit-headers): a String item per
// policy, with q and w in RateLimit-Policy, r and t in RateLimit.
func TestExceededProblem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy       ratelimit.Policy
		policyField  string
		limitField   string
		detailPrefix string
	}{
		{ratelimit.Policy{Name: "token", Quota: 600, Window: time.Minute}, `"token";q=600;w=60`, `"token";r=0;t=12`,
			"Too many requests with this API token: 600 are allowed every 60 seconds."},
		{ratelimit.Policy{Name: "failed_auth", Quota: 50, Window: 5 * time.Minute}, `"failed_auth";q=50;w=300`, `"failed_auth";r=0;t=12`,
			"Too many failed authentications from this address: 50 are allowed every 300 seconds"},
		{ratelimit.Policy{Name: "charges", Quota: 10, Window: time.Hour}, `"charges";q=10;w=3600`, `"charges";r=0;t=12`,
			"Too many charges for this user: 10 rides are allowed in any 3600 seconds. Nothing was done and nothing is stored on the key"},
	} {
		p := (&ratelimit.Exceeded{Policy: tc.policy, RetryAfter: 12}).Problem()
		require.Equal(t, http.StatusTooManyRequests, p.Status)
		require.Equal(t, "rate_limited", p.Code)
		require.Equal(t, 12, p.RetryAfter)
		require.Equal(t, tc.policyField, p.Header.Get("RateLimit-Policy"))
		require.Equal(t, tc.limitField, p.Header.Get("RateLimit"))
		require.Contains(t, p.Detail, tc.detailPrefix)
	}
}

// An explicit 0 turns one limit off; RATE_LIMITS=off turns them all off;
// a window must be whole seconds.
func TestSettingsFromEnv(t *testing.T) {
	// make dev and make test export RATE_LIMITS=off for the processes
	// they start; each case here reads only what it sets itself.
	t.Setenv("RATE_LIMITS", "")
	read := func(t *testing.T) (token, failedAuth, charges ratelimit.Policy, err error) {
		t.Helper()
		var env config.Env
		token, failedAuth = ratelimit.EdgeFromEnv(&env)
		charges = ratelimit.ChargesFromEnv(&env)
		return token, failedAuth, charges, env.Err()
	}

	t.Run("DefaultsAreOn", func(t *testing.T) {
		token, failedAuth, charges, err := read(t)
		require.NoError(t, err)
		require.Equal(t, ratelimit.Policy{Name: "token", Quota: 600, Window: time.Minute}, token)
		require.Equal(t, ratelimit.Policy{Name: "failed_auth", Quota: 50, Window: 5 * time.Minute}, failedAuth)
		require.Equal(t, ratelimit.Policy{Name: "charges", Quota: 10, Window: time.Hour}, charges)
	})

	t.Run("ZeroTurnsOneOff", func(t *testing.T) {
		t.Setenv("RATE_LIMIT_CHARGES", "0")
		token, _, charges, err := read(t)
		require.NoError(t, err)
		require.False(t, charges.On())
		require.True(t, token.On())
	})

	t.Run("OffTurnsAllOff", func(t *testing.T) {
		t.Setenv("RATE_LIMITS", "off")
		t.Setenv("RATE_LIMIT_TOKEN_REQUESTS", "5")
		token, failedAuth, charges, err := read(t)
		require.NoError(t, err)
		require.False(t, token.On() || failedAuth.On() || charges.On())
	})

	t.Run("RefusesAnythingButOnOrOff", func(t *testing.T) {
		t.Setenv("RATE_LIMITS", "false")
		_, _, _, err := read(t)
		require.ErrorContains(t, err, "RATE_LIMITS=false: must be on or off")
	})

	t.Run("RefusesAWindowOfPartSeconds", func(t *testing.T) {
		t.Setenv("RATE_LIMIT_TOKEN_WINDOW", "1500ms")
		t.Setenv("RATE_LIMIT_CHARGES_WINDOW", "500ms")
		_, _, _, err := read(t)
		require.ErrorContains(t, err, "RATE_LIMIT_TOKEN_WINDOW=1500ms: must be whole seconds")
		require.ErrorContains(t, err, "RATE_LIMIT_CHARGES_WINDOW=500ms: must be at least 1s")
	})
}
