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
	fake, fakeURL := fakestripetest.Start(t, &fakestripe.Config{})
	customer, err := fakestripetest.NewClient(fakeURL, "sk_test_floor").Customers.New(&stripe.CustomerParams{Source: stripe.String("tok_visa")})
	require.NoError(t, err)
	pool, trips := dbtest.NewCounted(t, 4)
	_, err = pool.Exec(ctx, `INSERT INTO users (email, stripe_customer_id, api_token_hash)
		VALUES ('user@example.com', $1, sha256('token'))`, customer.ID)
	require.NoError(t, err)
	var seeded string
	require.NoError(t, pool.QueryRow(ctx, floorCustomerSQL).Scan(&seeded))
	srv := httptest.NewServer(NewFloor(pool, fakeURL, "sk_test_floor", seeded))
	t.Cleanup(srv.Close)

	trips.Reset()
	for n := range 2 {
		req, err := newRide(srv.URL, "floor-test")
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)
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

	resp, err := http.Get(srv.URL + "/healthz")
	require.NoError(t, err)
	count, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, "2\n", string(count))
}
