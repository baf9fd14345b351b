package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// DebugHandler serves net/http/pprof's profiles under /debug/pprof/. It
// is its own mux, never the API's router or http.DefaultServeMux, so the
// profiles are reachable only on the listener ServeDebug opens.
func DebugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// ServeDebug serves DebugHandler on addr until ctx is done. It listens
// before it returns, so a bad address stops the process at start, and
// serves in the background. An empty addr serves nothing: profiles expose
// the process's internals (command line, heap), so they are off unless
// DEBUG_ADDR asks for them, on an address meant for operators only.
func ServeDebug(ctx context.Context, addr string, logger *slog.Logger) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen for pprof on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           DebugHandler(),
		ReadHeaderTimeout: 5 * time.Second,
		// No WriteTimeout: a CPU profile or trace streams for as long as
		// its seconds parameter asks.
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx) // a profile cut short is only a lost profile
	}()
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			logger.ErrorContext(ctx, "pprof server stopped", "addr", addr, "error", err)
		}
	}()
	logger.InfoContext(ctx, "serving pprof", "addr", ln.Addr().String())
	return nil
}
