package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/dev/fakestripe/fakestripetest"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
)

// TestFloor: the api's I/O floor makes a new ride's exchanges, no more and
// no fewer: three round trips to Postgres and one charge at Stripe per
// ride, a 201 with the charge's id, and the count of its rides by which
// the bench divides its CPU.
func TestFloor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newReferenceStack(t)
	fake, fakeURL, pool, trips := s.fake, s.fakeURL, s.pool, s.trips
	_, err := pool.Exec(ctx, `INSERT INTO users (email, stripe_customer_id, api_token_hash)
		VALUES ('user@example.com', $1, sha256('token'))`, s.customer)
	require.NoError(t, err)
	var seeded string
	require.NoError(t, pool.QueryRow(ctx, floorCustomerSQL).Scan(&seeded))
	srv := httptest.NewServer(NewFloor(pool, fakeURL, referenceKey, seeded))
	t.Cleanup(srv.Close)

	trips.Reset()
	for n := range 2 {
		status, body := postRide(t, srv.URL, "floor-test")
		require.Equal(t, http.StatusCreated, status, "%s", body)
		var ride struct {
			ID       int64  `json:"id"`
			ChargeID string `json:"stripe_charge_id"`
		}
		require.NoError(t, json.NewDecoder(bytes.NewReader(body)).Decode(&ride))
		require.Equal(t, int64(n+1), ride.ID)
		require.True(t, strings.HasPrefix(ride.ChargeID, "ch_"), "charge id %q", ride.ChargeID)
	}
	require.Equal(t, int64(2*floorTrips), trips.Total(), "round trips for two rides")
	require.Equal(t, 2, fake.Stats().ChargeRequests, "charges for two rides")

	require.Equal(t, "2\n", ridesSoFar(t, srv.URL))
}

// referenceKey is the Stripe key of a referenceStack's fake.
const referenceKey = "sk_test_reference"

// referenceStack is what a server the api is measured against needs in
// a test: the Stripe fake, a customer it knows, and a fresh database
// whose round trips are counted.
type referenceStack struct {
	fake     *fakestripe.Server
	fakeURL  string
	customer string
	pool     *pgxpool.Pool
	trips    *dbtest.RoundTrips
}

func newReferenceStack(t *testing.T) referenceStack {
	var s referenceStack
	s.fake, s.fakeURL = fakestripetest.Start(t, &fakestripe.Config{})
	customer, err := fakestripetest.NewClient(s.fakeURL, referenceKey).Customers.New(&stripe.CustomerParams{Source: stripe.String("tok_visa")})
	require.NoError(t, err)
	s.customer = customer.ID
	s.pool, s.trips = dbtest.NewCounted(t, 4)
	return s
}

// postRide is a POST /rides under key to a reference server, and its
// status and body.
func postRide(t *testing.T, base, key string) (int, []byte) {
	req, err := newRide(base, key)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, body
}

// ridesSoFar is a reference server's GET /healthz: its count of rides.
func ridesSoFar(t *testing.T, base string) string {
	resp, err := http.Get(base + "/healthz")
	require.NoError(t, err)
	defer resp.Body.Close()
	count, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(count)
}
