package e2e_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/project"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet/fleettest"
)

// TestRefusesDangerousSettings starts every command that reads a setting
// with a dangerous or inconsistent value of it, and requires each to stop
// at start with a non-zero exit, naming the settings involved, never the
// Go field they fill. Which commands read a setting is each command's own
// answer (-settings), not a list kept here: a command that starts reading
// it is held to the rule at once.
func TestRefusesDangerousSettings(t *testing.T) {
	t.Parallel()
	// Every refusal comes before a connection: nothing listens here.
	f := fleettest.New(t, "DATABASE_URL=postgres://rocketrides@127.0.0.1:1/none?sslmode=disable", "STRIPE_API_KEY=sk_test_settings")
	readers := settingReaders(t, f)

	for _, c := range []struct {
		name string
		env  []string
		// reads are the settings a command must read to be held to the
		// rule: the refused one, and the one it is compared with.
		reads []string
		wants []string
	}{
		// The STRIPE_TIMEOUT=2m, longer than the 90s lock.
		{"StripeTimeoutPastTheLock", []string{"STRIPE_TIMEOUT=2m"}, []string{"STRIPE_TIMEOUT", "IDEMPOTENCY_LOCK_TIMEOUT"},
			[]string{"STRIPE_TIMEOUT=2m: must be below IDEMPOTENCY_LOCK_TIMEOUT (1m30s)"}},
		{"StripeTimeoutAtTheLock", []string{"STRIPE_TIMEOUT=20s", "IDEMPOTENCY_LOCK_TIMEOUT=20s"}, []string{"STRIPE_TIMEOUT", "IDEMPOTENCY_LOCK_TIMEOUT"},
			[]string{"STRIPE_TIMEOUT=20s: must be below IDEMPOTENCY_LOCK_TIMEOUT (20s)"}},
		{"AbsurdStripeTimeout", []string{"STRIPE_TIMEOUT=100000h"}, []string{"STRIPE_TIMEOUT"},
			[]string{"STRIPE_TIMEOUT=100000h: must be at most 5m"}},
		// The IDEMPOTENCY_LOCK_TIMEOUT=1000h, which the docs
		// said must stay below REAPER_MAX_AGE.
		{"LockTimeoutPastTheKeysLifetime", []string{"IDEMPOTENCY_LOCK_TIMEOUT=1000h"}, []string{"IDEMPOTENCY_LOCK_TIMEOUT"},
			[]string{"IDEMPOTENCY_LOCK_TIMEOUT=1000h: must be below REAPER_MAX_AGE (72h)"}},
		{"LockTimeoutAtTheKeysLifetime", []string{"IDEMPOTENCY_LOCK_TIMEOUT=2h", "REAPER_MAX_AGE=2h"}, []string{"IDEMPOTENCY_LOCK_TIMEOUT"},
			[]string{"IDEMPOTENCY_LOCK_TIMEOUT=2h: must be below REAPER_MAX_AGE (2h)"}},
		// The reaper used to say Config.RetainReaped and Config.MaxAge.
		{"KeyRecordWithinTheKeysLifetime", []string{"REAPED_KEY_RETENTION=24h"}, []string{"REAPED_KEY_RETENTION"},
			[]string{"REAPED_KEY_RETENTION=24h: must exceed REAPER_MAX_AGE (72h)"}},
		// With a publishable key every ride stayed pending.
		{"PublishableStripeKey", []string{"STRIPE_API_KEY=pk_test_publishablekeepmesecret"}, []string{"STRIPE_API_KEY"},
			[]string{"STRIPE_API_KEY=", "a publishable key (pk_)"}},
		{"MalformedStripeKey", []string{"STRIPE_API_KEY=Bearer sk_test_malformedkeepmesecret"}, []string{"STRIPE_API_KEY"},
			[]string{"STRIPE_API_KEY=", "not a Stripe secret key"}},
		{"KeyRetentionPastStripesOnAName", []string{"STRIPE_KEY_RETENTION=48h", "STRIPE_API_BASE=http://127.0.0.1.nip.io:12111"}, []string{"STRIPE_KEY_RETENTION"},
			[]string{"STRIPE_KEY_RETENTION=48h: above Stripe's 24h", "a loopback address"}},
		{"RateLimitsNeitherOnNorOff", []string{"RATE_LIMITS=maybe"}, []string{"RATE_LIMITS"},
			[]string{"RATE_LIMITS=maybe: must be on or off"}},
		{"LoginFirstWaitPastTheLongest", []string{"CONSOLE_LOGIN_FIRST_WAIT=1h"}, []string{"CONSOLE_LOGIN_FIRST_WAIT"},
			[]string{"CONSOLE_LOGIN_FIRST_WAIT=1h: must be at most 15m"}},
		// It used to fail later, naming the listener's address.
		{"HostNotThisMachines", []string{"HOST=evil.example"}, []string{"HOST"},
			[]string{"HOST=evil.example: the name does not resolve"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var commands []string
			for name, reads := range readers {
				if !slices.ContainsFunc(c.reads, func(s string) bool { return !slices.Contains(reads, s) }) {
					commands = append(commands, name)
				}
			}
			require.NotEmpty(t, commands, "no command reads %v", c.reads)
			for _, name := range commands {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				_, err := f.Run(ctx, name, c.env)
				cancel()
				require.Error(t, err, "%s started with %v", name, c.env)
				require.NotContains(t, err.Error(), "killed before it finished", "%s did not stop at start", name)
				require.Contains(t, err.Error(), "exit status", name)
				for _, want := range c.wants {
					require.Contains(t, err.Error(), want, name)
					require.Equal(t, 1, strings.Count(err.Error(), want), "%s refuses it once", name)
				}
				require.NotContains(t, err.Error(), "Config.", "%s names a Go field", name)
				require.NotContains(t, err.Error(), "keepmesecret", "%s shows the secret key", name)
			}
		})
	}
}

// settingReaders maps each command that lists its settings (-settings)
// to the settings it reads. The seed, a one-shot command of its own
// shape, reads the Stripe settings (payment.ConfigFromEnv), as its
// main says.
func settingReaders(t *testing.T, f *fleet.Fleet) map[string][]string {
	t.Helper()
	root, err := project.Root()
	require.NoError(t, err)
	entries, err := os.ReadDir(filepath.Join(root, "cmd"))
	require.NoError(t, err)
	readers := map[string][]string{"seed": {"STRIPE_API_KEY", "STRIPE_API_BASE", "STRIPE_TIMEOUT"}}
	for _, e := range entries {
		if !f.Has(e.Name()) || e.Name() == "seed" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := f.Run(ctx, e.Name(), nil, "-settings")
		cancel()
		var reads []struct{ Name string }
		if err != nil || json.Unmarshal([]byte(out), &reads) != nil {
			continue // not a process.Main command (localpg, migrate, bench ...)
		}
		for _, r := range reads {
			readers[e.Name()] = append(readers[e.Name()], r.Name)
		}
	}
	require.Contains(t, readers, "api")
	return readers
}
