package serve_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/serve"
)

func TestServer(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		server  *serve.Server
		release chan struct{} // lets /slow answer
		entered chan struct{} // /slow has started
	}

	setup := func(t *testing.T, config *serve.Config) *testBundle {
		t.Helper()
		b := &testBundle{release: make(chan struct{}), entered: make(chan struct{}, 1)}
		mux := http.NewServeMux()
		mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
		mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
			b.entered <- struct{}{}
			<-b.release
			_, _ = io.WriteString(w, "slow")
		})
		config.Name, config.Addr, config.Handler = "test", "127.0.0.1:0", mux
		if config.Logger == nil {
			config.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
		}
		var err error
		b.server, err = serve.Listen(config)
		require.NoError(t, err)
		return b
	}

	get := func(b *testBundle, path string) (string, error) {
		resp, err := http.Get("http://" + b.server.Addr() + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}

	serveInBackground := func(ctx context.Context, b *testBundle) <-chan error {
		done := make(chan error, 1)
		go func() { done <- b.server.Serve(ctx) }()
		return done
	}

	waitFor := func(t *testing.T, done <-chan error) error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return")
			return nil
		}
	}

	t.Run("ServesUntilCancelled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &serve.Config{})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := serveInBackground(ctx, b)

		body, err := get(b, "/ok")
		require.NoError(t, err)
		require.Equal(t, "ok", body)

		cancel()
		require.NoError(t, waitFor(t, done))
		_, err = net.DialTimeout("tcp", b.server.Addr(), time.Second)
		require.Error(t, err, "the listener closes with its context")
	})

	t.Run("LetsRequestsInFlightFinish", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &serve.Config{})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := serveInBackground(ctx, b)

		answer := make(chan string, 1)
		go func() {
			body, err := get(b, "/slow")
			if err != nil {
				body = err.Error()
			}
			answer <- body
		}()
		<-b.entered
		cancel()
		// New connections are refused while the request in flight goes on.
		require.Eventually(t, func() bool {
			_, err := net.DialTimeout("tcp", b.server.Addr(), 100*time.Millisecond)
			return err != nil
		}, 5*time.Second, 10*time.Millisecond)
		close(b.release)
		require.Equal(t, "slow", <-answer)
		require.NoError(t, waitFor(t, done))
	})

	t.Run("CutsOffRequestsAfterTheShutdownTimeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &serve.Config{ShutdownTimeout: 50 * time.Millisecond})
		defer close(b.release)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := serveInBackground(ctx, b)

		answer := make(chan error, 1)
		go func() {
			_, err := get(b, "/slow")
			answer <- err
		}()
		<-b.entered
		cancel()
		require.ErrorContains(t, waitFor(t, done), "shut down test within 50ms")
		require.Error(t, <-answer, "the request was cut off")
	})

	t.Run("ListensOnAnyFreePort", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &serve.Config{})
		_, port, err := net.SplitHostPort(b.server.Addr())
		require.NoError(t, err)
		require.NotEqual(t, "0", port)
	})

	t.Run("StartServesInTheBackground", func(t *testing.T) {
		t.Parallel()
		// Discarding: the server may log its stop after the test ends.
		b := setup(t, &serve.Config{Logger: slog.New(slog.DiscardHandler)})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		b.server.Start(ctx)
		body, err := get(b, "/ok")
		require.NoError(t, err)
		require.Equal(t, "ok", body)
		cancel()
		require.Eventually(t, func() bool {
			_, err := net.DialTimeout("tcp", b.server.Addr(), 100*time.Millisecond)
			return err != nil
		}, 5*time.Second, 10*time.Millisecond)
	})

	t.Run("RefusesAnAddressInUse", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		_, err = serve.Listen(&serve.Config{Name: "test", Addr: ln.Addr().String(), Handler: http.NotFoundHandler()})
		require.ErrorContains(t, err, "listen for test on "+ln.Addr().String())
	})

	t.Run("RefusesABadConfig", func(t *testing.T) {
		t.Parallel()
		h := http.NotFoundHandler()
		for want, config := range map[string]*serve.Config{
			"Config is required":                nil,
			"Config.Name is required":           {Addr: ":0", Handler: h},
			"Config.Addr is required":           {Name: "test", Handler: h},
			"Config.Handler is required":        {Name: "test", Addr: ":0"},
			"Config.ShutdownTimeout must not":   {Name: "test", Addr: ":0", Handler: h, ShutdownTimeout: -time.Second},
			"Config's timeouts must not be neg": {Name: "test", Addr: ":0", Handler: h, WriteTimeout: -time.Second},
		} {
			_, err := serve.Listen(config)
			require.ErrorContains(t, err, want)
		}
	})
}
