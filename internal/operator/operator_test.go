package operator_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/operator"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
)

const password = "correct horse battery"

var (
	home  = netip.MustParseAddr("192.0.2.1")
	other = netip.MustParseAddr("192.0.2.2")
)

func TestCheckPassword(t *testing.T) {
	t.Parallel()
	// A weak password is refused by the rule it breaks.
	for pw, want := range map[string]string{
		"":                           "the password is blank",
		"a":                          "the password has 1 characters, at least 12",
		"   \t\t   \n\n   ":          "the password is blank",
		"            ":               "the password is blank",
		"eleven char":                "the password has 11 characters, at least 12",
		"aaaaaaaaaaaaaaa":            "the password is one character repeated",
		"ééééééééééééé":              "the password is one character repeated",
		"correct horse\nbattery":     "the password holds a control character",
		"correct\thorse battery":     "the password holds a control character",
		"ada.lovelace":               "the password is the account's name",
		"Ada.Lovelace":               "the password is the account's name",
		strings.Repeat("ab", 513):    "the password has 1026 characters, at most 1024",
		"correct horse \xff battery": "the password is not valid UTF-8",
	} {
		err := operator.CheckPassword("ada.lovelace", pw)
		var refused *operator.PasswordError
		require.ErrorAs(t, err, &refused, "%q", pw)
		require.Contains(t, refused.Reason, want, "%q", pw)
	}
	for _, pw := range []string{password, "twelve chars", "ééééééééééé!", " leading and trailing spaces "} {
		require.NoError(t, operator.CheckPassword("ada.lovelace", pw), "%q", pw)
	}
}

func TestCheckName(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"":                       "the operator's name is required",
		"   ":                    "the operator's name is required",
		" ada":                   "begins or ends with a space",
		"ada ":                   "begins or ends with a space",
		"ada\nroot":              "control or formatting character",
		strings.Repeat("a", 101): "the operator's name has 101 characters, at most 100",
	} {
		var refused *operator.NameError
		require.ErrorAs(t, operator.CheckName(name), &refused, "%q", name)
		require.Contains(t, refused.Reason, want, "%q", name)
	}
	require.NoError(t, operator.CheckName("Ada Lovelace"))
}

type testBundle struct {
	store *operator.Store
	ctx   context.Context
	count func(sql string, args ...any) int
	// add adds each account with the test's password; login logs name in
	// from addr with it and returns the session's token.
	add   func(names ...string)
	login func(name string, addr netip.Addr) string
}

func setup(t *testing.T, config operator.Config) *testBundle {
	t.Helper()
	pool := dbtest.New(t)
	config.Pool = pool
	store, err := operator.New(&config)
	require.NoError(t, err)
	ctx := context.Background()
	return &testBundle{store: store, ctx: ctx, count: func(sql string, args ...any) int {
		t.Helper()
		var n int
		require.NoError(t, pool.QueryRow(ctx, sql, args...).Scan(&n))
		return n
	}, add: func(names ...string) {
		t.Helper()
		for _, name := range names {
			_, err := store.Add(ctx, name, password)
			require.NoError(t, err)
		}
	}, login: func(name string, addr netip.Addr) string {
		t.Helper()
		_, token, err := store.Login(ctx, name, password, addr)
		require.NoError(t, err)
		return token
	}}
}

func TestAccounts(t *testing.T) {
	t.Parallel()

	// The table keeps an argon2id hash, never the password, and a hash
	// of its own for every account, salted.
	t.Run("KeepsOnlyAnArgon2idHash", func(t *testing.T) {
		t.Parallel()
		b := setup(t, operator.Config{})
		b.add("ada", "grace")
		require.Equal(t, 2, b.count(`SELECT count(*) FROM operators WHERE password_hash LIKE '$argon2id$v=19$m=19456,t=2,p=1$%'`))
		require.Equal(t, 0, b.count(`SELECT count(*) FROM operators WHERE position($1 IN password_hash) > 0`, password))
		require.Equal(t, 2, b.count(`SELECT count(DISTINCT password_hash) FROM operators`), "each its own salt")
	})

	t.Run("AddRefusesByName", func(t *testing.T) {
		t.Parallel()
		b := setup(t, operator.Config{})
		var weak *operator.PasswordError
		_, err := b.store.Add(b.ctx, "ada", "a")
		require.ErrorAs(t, err, &weak)
		var badName *operator.NameError
		_, err = b.store.Add(b.ctx, " ada", password)
		require.ErrorAs(t, err, &badName)
		require.Equal(t, 0, b.count(`SELECT count(*) FROM operators`), "nothing stored")

		b.add("ada")
		_, err = b.store.Add(b.ctx, "ada", "another long password")
		require.ErrorIs(t, err, operator.ErrExists)
		_, _, err = b.store.Login(b.ctx, "ada", "another long password", home)
		require.ErrorIs(t, err, operator.ErrRefused, "the first password stands")
	})

	t.Run("LoginStartsASessionKeptOnTheServer", func(t *testing.T) {
		t.Parallel()
		b := setup(t, operator.Config{})
		ada, err := b.store.Add(b.ctx, "ada", password)
		require.NoError(t, err)
		s, token, err := b.store.Login(b.ctx, "ada", password, home)
		require.NoError(t, err)
		require.Equal(t, "ada", s.Operator)
		require.Equal(t, ada.ID, s.OperatorID)
		require.WithinDuration(t, time.Now().Add(operator.DefaultSessionLifetime), s.Expires, time.Minute)
		require.Equal(t, 0, b.count(`SELECT count(*) FROM operator_sessions WHERE token_sha256 = convert_to($1, 'UTF8')`, token),
			"the table keeps the token's hash only")

		found, err := b.store.Session(b.ctx, token)
		require.NoError(t, err)
		require.Equal(t, s.Operator, found.Operator)
		require.Equal(t, s.Sign("csrf"), found.Sign("csrf"), "the form token is the session's")

		// Another session of the same account signs differently.
		s2, token2, err := b.store.Login(b.ctx, "ada", password, home)
		require.NoError(t, err)
		require.NotEqual(t, s.Sign("csrf"), s2.Sign("csrf"))

		require.NoError(t, b.store.Logout(b.ctx, token))
		_, err = b.store.Session(b.ctx, token)
		require.ErrorIs(t, err, operator.ErrNoSession, "logged out")
		_, err = b.store.Session(b.ctx, token2)
		require.NoError(t, err, "the other session goes on")

		for _, bad := range []string{"", "x", token + "x", strings.Repeat("!", len(token))} {
			_, err = b.store.Session(b.ctx, bad)
			require.ErrorIs(t, err, operator.ErrNoSession, "%q", bad)
		}
	})

	t.Run("SessionsExpire", func(t *testing.T) {
		t.Parallel()
		b := setup(t, operator.Config{SessionLifetime: 50 * time.Millisecond})
		b.add("ada")
		token := b.login("ada", home)
		time.Sleep(100 * time.Millisecond)
		_, err := b.store.Session(b.ctx, token)
		require.ErrorIs(t, err, operator.ErrNoSession)
		_ = b.login("ada", home)
		require.Equal(t, 1, b.count(`SELECT count(*) FROM operator_sessions`), "a login clears the expired ones")
	})

	// A wrong name, a wrong password and a disabled account are refused
	// alike; only the error's text, for the log, says which.
	t.Run("LoginRefusesAlike", func(t *testing.T) {
		t.Parallel()
		b := setup(t, operator.Config{})
		b.add("ada", "grace")
		_, err := b.store.Disable(b.ctx, "grace")
		require.NoError(t, err)
		for _, tc := range []struct{ name, password, why string }{
			{"mallory", password, `no account is named "mallory"`},
			{"ada", "not the password", `wrong password for "ada"`},
			{"grace", password, `the account "grace" is disabled`},
			{"", password, "the operator's name is required"},
		} {
			s, token, err := b.store.Login(b.ctx, tc.name, tc.password, home)
			require.ErrorIs(t, err, operator.ErrRefused, tc.name)
			require.ErrorContains(t, err, tc.why, tc.name)
			require.Nil(t, s)
			require.Empty(t, token)
		}
		require.Equal(t, 0, b.count(`SELECT count(*) FROM operator_sessions`))
	})

	t.Run("DisableEndsItsSessions", func(t *testing.T) {
		t.Parallel()
		b := setup(t, operator.Config{})
		b.add("ada", "grace")
		token1 := b.login("ada", home)
		token2 := b.login("ada", other)
		graceToken := b.login("grace", home)

		d, err := b.store.Disable(b.ctx, "ada")
		require.NoError(t, err)
		require.Equal(t, "ada", d.Operator.Name)
		require.Equal(t, 2, d.SessionsEnded)
		for _, token := range []string{token1, token2} {
			_, err = b.store.Session(b.ctx, token)
			require.ErrorIs(t, err, operator.ErrNoSession)
		}
		_, err = b.store.Session(b.ctx, graceToken)
		require.NoError(t, err, "another account's session goes on")
		_, err = b.store.Enabled(b.ctx, "ada")
		require.ErrorIs(t, err, operator.ErrNotFound)

		again, err := b.store.Disable(b.ctx, "ada")
		require.NoError(t, err, "disabling twice changes nothing")
		require.Equal(t, d.Since, again.Since)
		_, err = b.store.Disable(b.ctx, "mallory")
		require.ErrorIs(t, err, operator.ErrNotFound)
		require.Equal(t, 2, b.count(`SELECT count(*) FROM operators`), "the account stays, for the audit records")
	})

	// A session of an account disabled by hand in the table, without its
	// sessions ended, is not one either.
	t.Run("ASessionNeedsAnEnabledAccount", func(t *testing.T) {
		t.Parallel()
		b := setup(t, operator.Config{})
		b.add("ada")
		token := b.login("ada", home)
		require.Equal(t, 1, b.count(`WITH d AS (UPDATE operators SET disabled_at = now() RETURNING 1) SELECT count(*) FROM d`))
		_, err := b.store.Session(b.ctx, token)
		require.ErrorIs(t, err, operator.ErrNoSession)
	})

	t.Run("ResetSetsThePasswordEnablesAndEndsSessions", func(t *testing.T) {
		t.Parallel()
		b := setup(t, operator.Config{})
		_, err := b.store.Reset(b.ctx, "ada", password)
		require.NoError(t, err, "creates an account that is not there")
		token := b.login("ada", home)
		_, err = b.store.Disable(b.ctx, "ada")
		require.NoError(t, err)

		_, err = b.store.Reset(b.ctx, "ada", "a new long password")
		require.NoError(t, err)
		_, err = b.store.Session(b.ctx, token)
		require.ErrorIs(t, err, operator.ErrNoSession)
		_, _, err = b.store.Login(b.ctx, "ada", password, home)
		require.ErrorIs(t, err, operator.ErrRefused, "the old password")
		_, _, err = b.store.Login(b.ctx, "ada", "a new long password", home)
		require.NoError(t, err, "enabled again, with the new password")
		_, err = b.store.Reset(b.ctx, "ada", "short")
		var weak *operator.PasswordError
		require.ErrorAs(t, err, &weak)
	})

	// Free failures, then a wait that doubles with each failure, per
	// account name whatever the address.
	t.Run("ThrottlesPerAccount", func(t *testing.T) {
		t.Parallel()
		b := setup(t, operator.Config{Throttle: operator.Throttle{FreeFailures: 3, FirstWait: time.Minute, MaxWait: 4 * time.Minute}})
		b.add("ada")
		// Each attempt from an address of its own: only the account's
		// count grows.
		n := 0
		from := func() netip.Addr { n++; return netip.AddrFrom4([4]byte{198, 51, 100, byte(n)}) }
		// The wait passes, without the test sleeping through it.
		elapse := func() {
			t.Helper()
			require.Equal(t, 1, b.count(`WITH w AS (UPDATE operator_login_failures SET wait_until = clock_timestamp()
				WHERE scope = 'account' RETURNING 1) SELECT count(*) FROM w`))
		}
		waits := func(want time.Duration, msg string) {
			t.Helper()
			var throttled *operator.ThrottledError
			_, _, err := b.store.Login(b.ctx, "ada", password, from())
			require.ErrorAs(t, err, &throttled, "even the right password waits, from a new address: %s", msg)
			require.Equal(t, "account", throttled.Scope)
			require.LessOrEqual(t, throttled.RetryAfter, want, msg)
			require.Greater(t, throttled.RetryAfter, want-10*time.Second, msg)
		}
		fail := func() {
			t.Helper()
			_, _, err := b.store.Login(b.ctx, "ada", "wrong guess", from())
			require.ErrorIs(t, err, operator.ErrRefused)
		}

		fail()
		fail()
		fail()
		waits(time.Minute, "after the free failures")
		elapse()
		fail()
		waits(2*time.Minute, "the wait doubled")
		elapse()
		fail()
		elapse()
		fail()
		waits(4*time.Minute, "up to MaxWait")

		elapse()
		_, _, err := b.store.Login(b.ctx, "ada", password, from())
		require.NoError(t, err)
		fail() // free again: the owner's login started the account's count again
	})

	// Many names from one address: the address waits.
	t.Run("ThrottlesPerAddress", func(t *testing.T) {
		t.Parallel()
		b := setup(t, operator.Config{Throttle: operator.Throttle{FreeFailures: 3, FirstWait: time.Minute}})
		b.add("ada")
		for _, name := range []string{"root", "admin", "operator"} {
			_, _, err := b.store.Login(b.ctx, name, "guess", home)
			require.ErrorIs(t, err, operator.ErrRefused, name)
		}
		var throttled *operator.ThrottledError
		_, _, err := b.store.Login(b.ctx, "ada", password, home)
		require.ErrorAs(t, err, &throttled)
		require.Equal(t, "address", throttled.Scope)
		_, _, err = b.store.Login(b.ctx, "ada", password, other)
		require.NoError(t, err, "another address is not held up")

		// An IPv6 address is counted by its /64: a host has it whole.
		for i, name := range []string{"root2", "admin2", "operator2"} {
			_, _, err := b.store.Login(b.ctx, name, "guess", netip.MustParseAddr("2001:db8::"+string(rune('1'+i))))
			require.ErrorIs(t, err, operator.ErrRefused, name)
		}
		_, _, err = b.store.Login(b.ctx, "ada", password, netip.MustParseAddr("2001:db8::ffff:1"))
		require.ErrorAs(t, err, &throttled)
		require.Equal(t, "address", throttled.Scope)
		_, _, err = b.store.Login(b.ctx, "ada", password, netip.MustParseAddr("2001:db8:0:1::1"))
		require.NoError(t, err, "the next /64")
	})

	// Logging in to one's own account does not clear the guesses one
	// made at others from the same address; nor, among the free
	// failures, does it leave a wait behind.
	t.Run("OwnLoginDoesNotClearTheAddress", func(t *testing.T) {
		t.Parallel()
		b := setup(t, operator.Config{Throttle: operator.Throttle{FreeFailures: 3, FirstWait: time.Minute}})
		b.add("mallory")
		for range 2 {
			_, _, err := b.store.Login(b.ctx, "ada", "guess", home)
			require.ErrorIs(t, err, operator.ErrRefused)
			_, _, err = b.store.Login(b.ctx, "mallory", password, home)
			require.NoError(t, err)
		}
		_, _, err := b.store.Login(b.ctx, "grace", "guess", home)
		require.ErrorIs(t, err, operator.ErrRefused, "the third failure")
		var throttled *operator.ThrottledError
		_, _, err = b.store.Login(b.ctx, "mallory", password, home)
		require.ErrorAs(t, err, &throttled)
		require.Equal(t, "address", throttled.Scope)
	})

	// Guesses sent all at once meet the count one at a time: only the
	// free ones get their password checked.
	t.Run("ParallelGuessesGetNoMoreThanTheFreeOnes", func(t *testing.T) {
		t.Parallel()
		b := setup(t, operator.Config{Throttle: operator.Throttle{FreeFailures: 5, FirstWait: time.Minute}})
		b.add("ada")
		var (
			wg                 sync.WaitGroup
			mu                 sync.Mutex
			refused, throttled int
		)
		for i := range 40 {
			wg.Go(func() {
				_, _, err := b.store.Login(b.ctx, "ada", "guess "+string(rune('a'+i)), home)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case errors.Is(err, operator.ErrRefused):
					refused++
				case errors.Is(err, operator.ErrThrottled):
					throttled++
				default:
					t.Errorf("guess %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		require.Equal(t, 5, refused, "checked")
		require.Equal(t, 35, throttled)
	})

	t.Run("ForgetsOldCounts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, operator.Config{Throttle: operator.Throttle{FreeFailures: 1, FirstWait: 50 * time.Millisecond,
			MaxWait: 50 * time.Millisecond, ForgetAfter: 100 * time.Millisecond}})
		_, _, err := b.store.Login(b.ctx, "ada", "guess", home)
		require.ErrorIs(t, err, operator.ErrRefused)
		require.Equal(t, 2, b.count(`SELECT count(*) FROM operator_login_failures`))
		time.Sleep(200 * time.Millisecond)
		_, _, err = b.store.Login(b.ctx, "grace", "guess", other)
		require.ErrorIs(t, err, operator.ErrRefused)
		require.Equal(t, 2, b.count(`SELECT count(*) FROM operator_login_failures`), "the old counts are gone")
	})

	t.Run("ConfigIsChecked", func(t *testing.T) {
		t.Parallel()
		_, err := operator.New(&operator.Config{})
		require.ErrorContains(t, err, "Config.Pool")
		_, err = operator.New(&operator.Config{Pool: dbtest.New(t), Throttle: operator.Throttle{MaxWait: time.Hour, ForgetAfter: time.Minute}})
		require.ErrorContains(t, err, "ForgetAfter")
	})
}
