package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/rocketrides/rocketrides/internal/platform/serve"
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
	return serve.Background(ctx, &serve.Config{
		Name:    "pprof",
		Addr:    addr,
		Handler: DebugHandler(),
		Logger:  logger,
		// No WriteTimeout: a CPU profile or trace streams for as long as
		// its seconds parameter asks. A profile cut short by a shutdown
		// is only a lost profile.
		ShutdownTimeout: 5 * time.Second,
	})
}
