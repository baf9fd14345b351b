package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketrides/rocketrides/internal/payment"
)

// The minimal design's api: the article's four atomic phases served over
// HTTP with the project's own libraries and nothing more. It sends the
// minimal design's SQL (cost.go) with real arguments through pgx, in the
// api's three round trips, and charges through the project's Stripe client
// (payment.Gateway, on stripe-go) between the second and the third. It
// does not authenticate, log, count, fence, record steps or replay: it
// makes new rides only, and answers 409 to a key used before. The new step runs it as a process of its own
// (bench -minimal-api) at the api's measured rate, beside the I/O floor
// (floor.go), so that the api's CPU per ride reads against both: what the
// exchanges alone cost, and what the article's design costs when built on
// the same libraries.

// The minimal design's statements as cost.go's script sends them, with
// the ids the server knows in place of the script's currval.
const (
	minimalKeySQL = `INSERT INTO idempotency_keys (user_id, idempotency_key, request_method, request_path, request_params, recovery_point, locked_at)
VALUES ($1, $2, 'POST', '/rides', $3, 'started', now()) RETURNING id`
	minimalRideSQL = `INSERT INTO rides (idempotency_key_id, origin_lat, origin_lon, target_lat, target_lon, user_id)
VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`
	minimalAuditSQL = `INSERT INTO audit_records (user_id, action, resource_type, resource_id, origin_ip, data)
VALUES ($1, 'ride.created', 'ride', currval('rides_id_seq'), '127.0.0.1', $2)`
	minimalMoveSQL   = `UPDATE idempotency_keys SET locked_at = now(), recovery_point = $2 WHERE id = $1 AND recovery_point = $3`
	minimalChargeSQL = `UPDATE rides SET stripe_charge_id = $2 WHERE id = $1`
	minimalJobSQL    = `INSERT INTO staged_jobs (job_args, job_name) VALUES ($1, 'send_ride_receipt')`
	minimalFinishSQL = `UPDATE idempotency_keys SET locked_at = NULL, recovery_point = 'finished', response_code = 201,
       response_body = $2 WHERE id = $1 AND recovery_point = 'charge_created'`
)

// uniqueViolation is the SQLSTATE of the key's insert for a key the
// rider used before.
const uniqueViolation = "23505"

// minimalUserSQL is the minimal design's one rider (cost.go's schema).
const minimalUserSQL = `SELECT id, stripe_customer_id FROM users WHERE email = 'minimal@example.com'`

// MinimalAPI is the minimal design's api's handler.
type MinimalAPI struct {
	pool     *pgxpool.Pool
	gateway  *payment.Gateway
	user     int64
	customer string
	rides    atomic.Int64 // rides answered 201
}

// NewMinimalAPI returns the minimal design's api on pool, which holds
// cost.go's schema, charging its rider through gateway.
func NewMinimalAPI(ctx context.Context, pool *pgxpool.Pool, gateway *payment.Gateway) (*MinimalAPI, error) {
	m := &MinimalAPI{pool: pool, gateway: gateway}
	if err := pool.QueryRow(ctx, minimalUserSQL).Scan(&m.user, &m.customer); err != nil {
		return nil, fmt.Errorf("the minimal design's rider: %w", err)
	}
	return m, nil
}

// minimalRide is a ride's parameters, and with its id, amount and charge
// its answer.
type minimalRide struct {
	ID        int64   `json:"id,omitempty"`
	OriginLat float64 `json:"origin_lat"`
	OriginLon float64 `json:"origin_lon"`
	TargetLat float64 `json:"target_lat"`
	TargetLon float64 `json:"target_lon"`
	Amount    int64   `json:"amount,omitempty"`
	Currency  string  `json:"currency,omitempty"`
	ChargeID  string  `json:"stripe_charge_id,omitempty"`
}

func (m *MinimalAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/rides" {
		// GET /healthz, or anything else: up, and how many rides so far.
		fmt.Fprintln(w, m.rides.Load())
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		http.Error(w, "an Idempotency-Key header is required", http.StatusBadRequest)
		return
	}
	var ride minimalRide
	if err := json.NewDecoder(r.Body).Decode(&ride); err != nil {
		http.Error(w, "the body is not a ride's JSON: "+err.Error(), http.StatusBadRequest)
		return
	}
	answer, err := m.create(r.Context(), key, ride)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == uniqueViolation:
		http.Error(w, fmt.Sprintf("Idempotency-Key %q was used before: this api makes new rides only", key), http.StatusConflict)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(answer)
}

// create runs a new ride's four atomic phases and returns its answer.
func (m *MinimalAPI) create(ctx context.Context, key string, ride minimalRide) ([]byte, error) {
	params, err := json.Marshal(ride)
	if err != nil {
		return nil, err
	}
	// started: the key's insert, a transaction of its own.
	var keyID int64
	if err := m.pool.QueryRow(ctx, minimalKeySQL, m.user, key, params).Scan(&keyID); err != nil {
		return nil, fmt.Errorf("started: %w", err)
	}
	// ride_created: the ride, its audit record and the key's move.
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(minimalRideSQL, keyID, ride.OriginLat, ride.OriginLon, ride.TargetLat, ride.TargetLon, m.user).
		QueryRow(func(row pgx.Row) error { return row.Scan(&ride.ID) })
	b.Queue(minimalAuditSQL, m.user, params)
	b.Queue(minimalMoveSQL, keyID, "ride_created", "started").Exec(moved)
	b.Queue("COMMIT")
	if err := m.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("ride_created: %w", err)
	}
	charge, err := m.gateway.Charge(ctx, payment.ChargeRequest{Customer: m.customer, Amount: 2000, Currency: "usd",
		IdempotencyKey: "rocket-rides-" + strconv.FormatInt(keyID, 10)})
	if err != nil {
		return nil, err
	}
	ride.Amount, ride.Currency, ride.ChargeID = 2000, "usd", charge.ID
	answer, err := json.Marshal(ride)
	if err != nil {
		return nil, err
	}
	// charge_created, then finished: two transactions in one round trip.
	b = &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(minimalChargeSQL, ride.ID, charge.ID)
	b.Queue(minimalMoveSQL, keyID, "charge_created", "ride_created").Exec(moved)
	b.Queue("COMMIT")
	b.Queue("BEGIN")
	b.Queue(minimalJobSQL, `{"amount": 2000, "currency": "usd", "user_id": `+strconv.FormatInt(m.user, 10)+`}`)
	b.Queue(minimalFinishSQL, keyID, answer).Exec(moved)
	b.Queue("COMMIT")
	if err := m.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("charge_created and finished: %w", err)
	}
	m.rides.Add(1)
	return answer, nil
}

// moved reports a move of the key that found it elsewhere. It is no
// fence: its phase has already committed by the time the answer is read.
// It is there so that a run whose rides went wrong says so.
func moved(tag pgconn.CommandTag) error {
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("the key was not where the phase expected it (%s)", tag)
	}
	return nil
}
