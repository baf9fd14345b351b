package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketrides/rocketrides/internal/api"
	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/platform/db"
)

// The api's I/O floor: a server that makes a new ride's exchanges and
// nothing else. It reads POST /rides and its JSON body, makes three
// round trips to Postgres (the claim's, the ride phase's, then the
// charge's and the finish's, as the api does), a charge at the Stripe
// fake between the second and the third, and answers 201 with a JSON
// body, but each round trip is a SELECT 1 and nothing is checked or kept.
// The new step runs it as a process of its own (bench -floor) at the
// api's measured rate, so that its CPU per ride is what the api's
// exchanges cost this machine before the api does any work in them: the
// part of the api's CPU that no change to the api's own code can remove.

// floorTrips is the round trips to Postgres of a new ride.
const floorTrips = 3

// floorCustomerSQL is the seeded rider's Stripe customer, whom the
// floor's charges charge.
const floorCustomerSQL = `SELECT stripe_customer_id FROM users WHERE email = 'user@example.com'`

// Floor is the I/O floor's handler.
type Floor struct {
	pool      *pgxpool.Pool
	client    *http.Client
	stripe    string // the fake's base URL
	key       string // its API key
	customer  string
	charges   atomic.Int64 // charges asked for
	rides     atomic.Int64 // rides answered 201
	instances string       // this process's part of each charge's Idempotency-Key
}

// NewFloor returns the floor on pool, charging customer at the Stripe
// (fake) at base with key.
func NewFloor(pool *pgxpool.Pool, base, key, customer string) *Floor {
	f := &Floor{pool: pool, stripe: strings.TrimSuffix(base, "/"), key: key, customer: customer,
		client:    &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
		instances: fmt.Sprintf("floor-%d-%d", os.Getpid(), time.Now().UnixNano())}
	return f
}

// trip is one round trip to Postgres, in a pipeline as the api's are.
func (f *Floor) trip(ctx context.Context) error {
	b := &pgx.Batch{}
	b.Queue("SELECT 1")
	return f.pool.SendBatch(ctx, b).Close()
}

func (f *Floor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/rides" {
		// GET /healthz, or anything else: up, and how many rides so far.
		fmt.Fprintln(w, f.rides.Load())
		return
	}
	var params struct {
		OriginLat float64 `json:"origin_lat"`
		OriginLon float64 `json:"origin_lon"`
		TargetLat float64 `json:"target_lat"`
		TargetLon float64 `json:"target_lon"`
	}
	if err := json.NewDecoder(r.Body).Decode(&params); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	charge, err := f.ride(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"id": f.rides.Add(1), "origin_lat": params.OriginLat,
		"origin_lon": params.OriginLon, "target_lat": params.TargetLat, "target_lon": params.TargetLon,
		"amount": 2000, "currency": "usd", "stripe_charge_id": charge})
}

// ride makes a ride's exchanges and returns the charge's id.
func (f *Floor) ride(ctx context.Context) (string, error) {
	for range floorTrips - 1 {
		if err := f.trip(ctx); err != nil {
			return "", err
		}
	}
	form := url.Values{"amount": {"2000"}, "currency": {"usd"}, "customer": {f.customer}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.stripe+"/v1/charges", strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.SetBasicAuth(f.key, "")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%d", f.instances, f.charges.Add(1)))
	resp, err := f.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var charge struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&charge); err != nil || resp.StatusCode != http.StatusOK || charge.ID == "" {
		return "", fmt.Errorf("charge: %s %v", resp.Status, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return charge.ID, f.trip(ctx)
}

// ServeFloor serves the floor on $HOST:$PORT until ctx is done (see
// serveReference), charging the seeded rider.
func ServeFloor(ctx context.Context) error {
	return serveReference(ctx, func(pool *pgxpool.Pool, base, key string) (http.Handler, error) {
		var customer string
		if err := pool.QueryRow(ctx, floorCustomerSQL).Scan(&customer); err != nil {
			return nil, fmt.Errorf("the seeded rider's customer: %w", err)
		}
		return NewFloor(pool, base, key, customer), nil
	})
}

// ServeMinimalAPI serves the minimal design's api (minimal.go) on
// $HOST:$PORT until ctx is done (see serveReference), on a database that
// holds cost.go's schema, through the project's Stripe client with the
// api's defaults.
func ServeMinimalAPI(ctx context.Context) error {
	return serveReference(ctx, func(pool *pgxpool.Pool, base, key string) (http.Handler, error) {
		gateway, err := payment.New(&payment.Config{APIKey: key, BaseURL: base})
		if err != nil {
			return nil, err
		}
		return NewMinimalAPI(ctx, pool, gateway)
	})
}

// serveReference serves the handler newHandler makes, a server the api's
// CPU is read against, on $HOST:$PORT until ctx is done, with the api's
// own settings for Postgres and Stripe: DATABASE_URL, opened as the api
// opens it (db.Open, the pool of the api's default size),
// STRIPE_API_BASE and STRIPE_API_KEY; and with the api's default GC
// target, which saves the api a tenth of its CPU.
func serveReference(ctx context.Context, newHandler func(pool *pgxpool.Pool, base, key string) (http.Handler, error)) error {
	gc, err := api.GCPercent(api.DefaultGCPercent)
	if err != nil {
		return err
	}
	debug.SetGCPercent(gc)
	pool, err := db.Open(ctx, os.Getenv("DATABASE_URL"), 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	h, err := newHandler(pool, os.Getenv("STRIPE_API_BASE"), os.Getenv("STRIPE_API_KEY"))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(os.Getenv("HOST"), os.Getenv("PORT")))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
