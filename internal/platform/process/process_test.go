package process

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/metrics"
)

func TestRun(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		stdout, stderr bytes.Buffer
		closed         atomic.Bool
	}

	// start runs a command whose Build returns program, with args, until
	// ctx ends, and returns its exit status.
	start := func(t *testing.T, ctx context.Context, cfg *Config, program *Program, args ...string) (*testBundle, int) {
		t.Helper()
		b := &testBundle{}
		if cfg.Name == "" {
			cfg.Name = "test"
		}
		if cfg.Build == nil {
			cfg.Build = func(context.Context, *config.Env, *slog.Logger) (*Program, error) {
				program.Close = func() { b.closed.Store(true) }
				return program, nil
			}
		}
		flags := flag.NewFlagSet(cfg.Name, flag.ContinueOnError)
		flags.SetOutput(io.Discard)
		code := run(ctx, cfg, flags, args, &b.stdout, &b.stderr)
		return b, code
	}

	// printed is what the process printed on stderr besides its log
	// lines (which go there too).
	printed := func(b *testBundle) string {
		var out strings.Builder
		for line := range strings.Lines(b.stderr.String()) {
			if !strings.HasPrefix(line, "time=") {
				out.WriteString(line)
			}
		}
		return out.String()
	}

	runUntilCancelled := func(ctx context.Context) error {
		<-ctx.Done()
		return nil
	}
	onceSays := func(summary string, err error) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { return summary, err }
	}

	t.Run("OncePrintsTheSummary", func(t *testing.T) {
		t.Parallel()
		b, code := start(t, t.Context(), &Config{OnceUsage: "one pass"},
			&Program{Run: runUntilCancelled, Once: onceSays("reaped=3 abandoned=1", nil)}, "-once")
		require.Zero(t, code)
		require.Equal(t, "reaped=3 abandoned=1\n", b.stdout.String())
		require.Empty(t, printed(b))
		require.Contains(t, b.stderr.String(), "msg=Started process=test log_level=info", "the start line, with the settings")
		require.True(t, b.closed.Load(), "what Build opened is closed")
	})

	t.Run("OnceEndsWithTheExitCodeItAsksFor", func(t *testing.T) {
		t.Parallel()
		b, code := start(t, t.Context(), &Config{OnceUsage: "one pass", FailureCode: 2},
			&Program{Run: runUntilCancelled, Once: onceSays("discrepancies=1", ExitCode(1))}, "-once")
		require.Equal(t, 1, code)
		require.Equal(t, "discrepancies=1\n", b.stdout.String())
		require.Empty(t, printed(b), "a found discrepancy is not an error")
	})

	t.Run("AFailedPassPrintsTheErrorAndNoSummary", func(t *testing.T) {
		t.Parallel()
		b, code := start(t, t.Context(), &Config{OnceUsage: "one pass"},
			&Program{Run: runUntilCancelled, Once: onceSays("reaped=0", errors.New("database down"))}, "-once")
		require.Equal(t, 1, code)
		require.Empty(t, b.stdout.String())
		require.Equal(t, "test: database down\n", printed(b))

		_, code = start(t, t.Context(), &Config{OnceUsage: "one pass", FailureCode: 2},
			&Program{Run: runUntilCancelled, Once: onceSays("", errors.New("stripe down"))}, "-once")
		require.Equal(t, 2, code, "Config.FailureCode")
	})

	t.Run("ABadSettingStopsTheProcessAtStart", func(t *testing.T) {
		t.Parallel()
		b, code := start(t, t.Context(), &Config{
			Build: func(context.Context, *config.Env, *slog.Logger) (*Program, error) {
				return nil, errors.New("REAPER_MAX_AGE=0s: must be positive")
			},
		}, nil)
		require.Equal(t, 1, code)
		require.Equal(t, "test: REAPER_MAX_AGE=0s: must be positive\n", b.stderr.String())
	})

	t.Run("RunsUntilShutdown", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		running := make(chan struct{})
		type result struct {
			b    *testBundle
			code int
		}
		done := make(chan result, 1)
		go func() {
			b, code := start(t, ctx, &Config{OnceUsage: "one pass"}, &Program{
				Run: func(ctx context.Context) error {
					close(running)
					return runUntilCancelled(ctx)
				},
				Once: onceSays("never", nil),
			})
			done <- result{b, code}
		}()
		<-running
		cancel()
		select {
		case r := <-done:
			require.Zero(t, r.code)
			require.Empty(t, r.b.stdout.String(), "no summary without -once")
			require.True(t, r.b.closed.Load())
		case <-time.After(10 * time.Second):
			t.Fatal("the process did not stop")
		}
	})

	t.Run("ServesMetricsWhileRunning", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())

		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		scraped := make(chan int, 1)
		_, code := start(t, ctx, &Config{}, &Program{
			Metrics:     metrics.NewRegistry(),
			MetricsAddr: addr,
			Run: func(ctx context.Context) error {
				resp, err := http.Get("http://" + addr + "/metrics")
				if err != nil {
					return err
				}
				resp.Body.Close()
				scraped <- resp.StatusCode
				return nil
			},
		})
		require.Zero(t, code)
		require.Equal(t, http.StatusOK, <-scraped)
	})

	t.Run("OffersOnceOnlyToBackgroundProcesses", func(t *testing.T) {
		t.Parallel()
		_, code := start(t, t.Context(), &Config{}, &Program{Run: runUntilCancelled}, "-once")
		require.Equal(t, 2, code, "a command without OnceUsage has no -once")
	})

	t.Run("RefusesUnexpectedArguments", func(t *testing.T) {
		t.Parallel()
		b, code := start(t, t.Context(), &Config{}, &Program{Run: runUntilCancelled}, "extra")
		require.Equal(t, 2, code)
		require.Contains(t, b.stderr.String(), `unexpected arguments ["extra"]`)
	})

	t.Run("RefusesABadConfig", func(t *testing.T) {
		t.Parallel()
		var stderr bytes.Buffer
		flags := flag.NewFlagSet("test", flag.ContinueOnError)
		require.Equal(t, 2, run(t.Context(), &Config{Name: "test"}, flags, nil, io.Discard, &stderr))
		require.Contains(t, stderr.String(), "process: Config.Build is required")
	})
}

// t.Setenv rules out t.Parallel here.
func TestUnknownSettings(t *testing.T) {
	build := func(context.Context, *config.Env, *slog.Logger) (*Program, error) {
		return &Program{Run: func(context.Context) error { return nil }}, nil
	}

	t.Run("AMistypedSettingStopsTheProcess", func(t *testing.T) {
		t.Setenv("REAPER_MAX_AGES", "24h")
		var stdout, stderr bytes.Buffer
		require.Equal(t, 1, Run(t.Context(), &Config{Name: "test", Build: build}, nil, &stdout, &stderr))
		require.Contains(t, stderr.String(), "test: REAPER_MAX_AGES is not a setting of any Rocket Rides process; did you mean REAPER_MAX_AGE?")
		require.NotContains(t, stderr.String(), "Started")
	})

	t.Run("OtherSoftwaresVariablesDoNotStopIt", func(t *testing.T) {
		for _, name := range []string{"DATABASE_PASSWORD", "API_KEY", "LOG_FILE", "STRIPE_WEBHOOK_SECRET"} {
			t.Setenv(name, "theirs")
		}
		// Empty is unset, as every setting reads it.
		t.Setenv("REAPER_MAX_AGES", "")
		var stdout, stderr bytes.Buffer
		require.Zero(t, Run(t.Context(), &Config{Name: "test", Build: build}, nil, &stdout, &stderr), stderr.String())
		require.NotContains(t, stderr.String(), "is not a setting")
		require.Contains(t, stderr.String(), "Started")
	})

	t.Run("AllowUnknownStartsAndWarns", func(t *testing.T) {
		t.Setenv("REAPER_MAX_AGES", "24h")
		t.Setenv("ALLOW_UNKNOWN_SETTINGS", "true")
		var stdout, stderr bytes.Buffer
		require.Zero(t, Run(t.Context(), &Config{Name: "test", Build: build}, nil, &stdout, &stderr))
		require.Contains(t, stderr.String(), `level=WARN msg="Ignoring an unknown setting"`)
		require.Contains(t, stderr.String(), "allow_unknown_settings=true")
	})

	t.Run("HelpListsTheSettingsBuildReads", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		cfg := &Config{Name: "test", Build: func(_ context.Context, env *config.Env, _ *slog.Logger) (*Program, error) {
			env.String("METRICS_ADDR", "127.0.0.1:9100")
			if err := env.Err(); err != nil {
				return nil, err
			}
			t.Error("Build went on past env.Err() under -help")
			return nil, nil
		}}
		require.Zero(t, Run(t.Context(), cfg, []string{"-help"}, &stdout, &stderr))
		require.Contains(t, stderr.String(), "  METRICS_ADDR (address, default 127.0.0.1:9100)\n")
		require.Contains(t, stderr.String(), "  LOG_LEVEL (string, default info)\n")
	})
}
