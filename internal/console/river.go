package console

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"riverqueue.com/riverui"
)

// riverPrefix is where River UI is mounted.
const riverPrefix = "/river"

// newRiverUI is River's own UI (riverqueue.com/riverui) over the job
// queue, through a River client that only reads and inserts: it works no
// jobs.
func newRiverUI(pool *pgxpool.Pool, logger *slog.Logger) (*riverui.Handler, error) {
	client, err := river.NewClient[pgx.Tx](riverpgxv5.New(pool), &river.Config{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("console: river client for River UI: %w", err)
	}
	h, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(client, nil),
		Logger:    logger,
		Prefix:    riverPrefix,
	})
	if err != nil {
		return nil, fmt.Errorf("console: River UI: %w", err)
	}
	return h, nil
}

// Start starts River UI's background services (its caches of counts);
// they stop when ctx ends.
func (c *Console) Start(ctx context.Context) error {
	if err := c.river.Start(ctx); err != nil {
		return fmt.Errorf("console: start River UI: %w", err)
	}
	return nil
}

// riverPage puts River UI behind the console's login. Its API changes
// jobs (cancel, retry, delete) with requests its page sends itself, so
// every request that is not a GET must come from the console's origin,
// as the console's own forms must.
func (c *Console) riverPage(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := c.sessionOf(r)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		if s == nil {
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				http.Redirect(w, r, "/login?next="+urlQuery(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			http.Error(w, "Log in first.", http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !c.sameOrigin(r) {
			http.Error(w, "Refused: the request did not come from this console.", http.StatusForbidden)
			return
		}
		if r.URL.Path == riverPrefix+"/" {
			h.ServeHTTP(w, r) // River UI's page
			return
		}
		// River UI serves its files with a file server that lists a
		// directory (/river/assets/).
		noListing(h).ServeHTTP(w, r)
	})
}
