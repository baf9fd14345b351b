// Package serve runs the processes' HTTP servers (the api, the Stripe
// fake, the metrics and pprof listeners) the one same way: listen first,
// so that an address that is taken or malformed stops the process at
// start; serve until the context ends; then shut down gracefully, giving
// the requests in flight a bounded time to finish. Every server refuses
// a request whose length is ambiguous, Content-Length and
// Transfer-Encoding both, and closes its connection (framing.go).
package serve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Server defaults.
const (
	// DefaultReadHeaderTimeout bounds how long a client may take to send
	// its request headers, so that slow clients cannot hold connections
	// open for free (Slowloris).
	DefaultReadHeaderTimeout = 5 * time.Second

	// DefaultShutdownTimeout is how long the requests in flight get to
	// finish once the context ends.
	DefaultShutdownTimeout = 10 * time.Second
)

// Config configures a Server.
type Config struct {
	// Name says what the server serves ("api", "metrics", "pprof"), in
	// its log lines and errors. Required.
	Name string

	// Addr is the address to listen on, such as ":5000" or
	// "127.0.0.1:0" (any free port; Server.Addr tells which). Required.
	Addr string

	// Handler serves the requests. Required.
	Handler http.Handler

	// ReadHeaderTimeout defaults to DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration

	// ReadTimeout, WriteTimeout and IdleTimeout are http.Server's: zero
	// means none, as there. A server whose responses stream for as long
	// as the client asks (pprof) must leave WriteTimeout at zero.
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration

	// ShutdownTimeout is how long the requests in flight get to finish
	// once the context given to Serve ends; those still running then are
	// cut off. Defaults to DefaultShutdownTimeout.
	ShutdownTimeout time.Duration

	// Logger defaults to slog.Default(). It also receives net/http's own
	// complaints (a panicking handler, a TLS handshake error) at WARN.
	Logger *slog.Logger
}

func (c *Config) validate() error {
	switch {
	case c.Name == "":
		return errors.New("serve: Config.Name is required")
	case c.Addr == "":
		return fmt.Errorf("serve %s: Config.Addr is required", c.Name)
	case c.Handler == nil:
		return fmt.Errorf("serve %s: Config.Handler is required", c.Name)
	case c.ReadHeaderTimeout < 0, c.ReadTimeout < 0, c.WriteTimeout < 0, c.IdleTimeout < 0:
		return fmt.Errorf("serve %s: Config's timeouts must not be negative", c.Name)
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("serve %s: Config.ShutdownTimeout must not be negative, got %s", c.Name, c.ShutdownTimeout)
	}
	return nil
}

// Server is an HTTP server listening on its address.
type Server struct {
	name            string
	http            *http.Server
	listener        net.Listener
	shutdownTimeout time.Duration
	logger          *slog.Logger
}

// Listen opens config.Addr and returns the server, ready to Serve or
// Start. Nothing is served until then; connections wait in the backlog.
func Listen(config *Config) (*Server, error) {
	if config == nil {
		return nil, errors.New("serve: Config is required")
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	logger := cmp.Or(config.Logger, slog.Default())
	ln, err := net.Listen("tcp", config.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen for %s on %s: %w", config.Name, config.Addr, err)
	}
	return &Server{
		name: config.Name,
		http: &http.Server{
			// A request whose length is ambiguous is refused, whatever
			// the server (framing.go).
			Handler:           refuseAmbiguous(config.Handler, logger),
			ConnContext:       connContext,
			ReadHeaderTimeout: cmp.Or(config.ReadHeaderTimeout, DefaultReadHeaderTimeout),
			ReadTimeout:       config.ReadTimeout,
			WriteTimeout:      config.WriteTimeout,
			IdleTimeout:       config.IdleTimeout,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		},
		listener:        framingListener{ln},
		shutdownTimeout: cmp.Or(config.ShutdownTimeout, DefaultShutdownTimeout),
		logger:          logger,
	}, nil
}

// Addr is the address the server listens on, with the port the system
// chose when Config.Addr asked for any.
func (s *Server) Addr() string { return s.listener.Addr().String() }

// Serve serves until ctx ends, then shuts down: the listener closes at
// once and the requests in flight get Config.ShutdownTimeout to finish.
// It returns nil after a graceful shutdown, and an error when serving
// failed or requests were still running at the deadline (they are cut
// off).
func (s *Server) Serve(ctx context.Context) error {
	s.logger.InfoContext(ctx, "Serving HTTP", slog.String("server", s.name), slog.String("addr", s.Addr()))
	errc := make(chan error, 1)
	go func() { errc <- s.http.Serve(s.listener) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", s.name, err)
	case <-ctx.Done():
	}

	// Detached: ctx is already done, and the shutdown gets its own bound.
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.shutdownTimeout)
	defer cancel()
	if err := s.http.Shutdown(shutdownCtx); err != nil {
		closeErr := s.http.Close()
		return errors.Join(fmt.Errorf("shut down %s within %s: %w", s.name, s.shutdownTimeout, err), closeErr)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", s.name, err)
	}
	s.logger.InfoContext(ctx, "Stopped serving HTTP", slog.String("server", s.name))
	return nil
}

// Start serves in the background until ctx ends, for a listener beside
// the process's main work (metrics, pprof). A failure is logged: losing
// such a listener is no reason to stop the process.
func (s *Server) Start(ctx context.Context) {
	go func() {
		if err := s.Serve(ctx); err != nil {
			s.logger.ErrorContext(ctx, "HTTP server stopped", slog.String("server", s.name), slog.Any("error", err))
		}
	}()
}

// Background serves config beside a process's main work until ctx ends,
// for a listener an operator asks for (metrics, pprof): an empty Addr
// serves nothing. A bad address is an error at once.
func Background(ctx context.Context, config *Config) error {
	if config == nil || config.Addr == "" {
		return nil
	}
	srv, err := Listen(config)
	if err != nil {
		return err
	}
	srv.Start(ctx)
	return nil
}
