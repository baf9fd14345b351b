package bench

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/payment"
)

// TestMinimalAPI: the minimal design's api makes whole rides in the api's
// three round trips and one charge each, with the minimal design's rows
// (each key finished with the answer it gave, its ride charged, an audit
// record and a staged job), and refuses a key seen before with a 409,
// without charging again or writing anything.
func TestMinimalAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newReferenceStack(t)
	fake, pool, trips := s.fake, s.pool, s.trips
	_, err := pool.Exec(ctx, "DROP SCHEMA public CASCADE; CREATE SCHEMA public;"+minimalSchema)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE users SET stripe_customer_id = $1`, s.customer)
	require.NoError(t, err)
	gateway, err := payment.New(&payment.Config{APIKey: referenceKey, BaseURL: s.fakeURL})
	require.NoError(t, err)
	m, err := NewMinimalAPI(ctx, pool, gateway)
	require.NoError(t, err)
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	post := func(key string) (int, []byte) { return postRide(t, srv.URL, key) }

	trips.Reset()
	answers := map[string]string{}
	for n, key := range []string{"minimal-1", "minimal-2"} {
		status, body := post(key)
		require.Equal(t, http.StatusCreated, status, "%s", body)
		var ride minimalRide
		require.NoError(t, json.Unmarshal(body, &ride))
		require.Equal(t, int64(n+1), ride.ID)
		require.True(t, strings.HasPrefix(ride.ChargeID, "ch_"), "charge id %q", ride.ChargeID)
		require.Equal(t, 37.7749, ride.OriginLat, "the ride's parameters, from the request")
		answers[key] = string(body)
	}
	require.Equal(t, int64(2*3), trips.Total(), "round trips for two rides")
	require.Equal(t, 2, fake.Stats().ChargeRequests, "charges for two rides")

	rows := func() []int64 {
		var keys, finished, charged, audits, jobs int64
		require.NoError(t, pool.QueryRow(ctx, `
			SELECT (SELECT count(*) FROM idempotency_keys),
			       (SELECT count(*) FROM idempotency_keys WHERE recovery_point = 'finished' AND response_code = 201 AND locked_at IS NULL),
			       (SELECT count(*) FROM rides r JOIN idempotency_keys k ON k.id = r.idempotency_key_id WHERE r.stripe_charge_id IS NOT NULL),
			       (SELECT count(*) FROM audit_records a JOIN rides r ON r.id = a.resource_id),
			       (SELECT count(*) FROM staged_jobs)`).Scan(&keys, &finished, &charged, &audits, &jobs))
		return []int64{keys, finished, charged, audits, jobs}
	}
	require.Equal(t, []int64{2, 2, 2, 2, 2}, rows())
	for key, answer := range answers {
		var stored []byte
		require.NoError(t, pool.QueryRow(ctx, `SELECT response_body FROM idempotency_keys WHERE idempotency_key = $1`, key).Scan(&stored))
		require.JSONEq(t, answer, string(stored), "the answer the key %s keeps", key)
	}

	status, body := post("minimal-1")
	require.Equal(t, http.StatusConflict, status, "%s", body)
	require.Contains(t, string(body), `Idempotency-Key "minimal-1" was used before: this api makes new rides only`)
	require.Equal(t, 2, fake.Stats().ChargeRequests, "no charge for a key seen before")
	require.Equal(t, []int64{2, 2, 2, 2, 2}, rows(), "nothing written for a key seen before")

	// Garbage is refused before anything is written or charged.
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/rides", strings.NewReader(`{"origin_lat": "north"`))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "minimal-3")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "a body that is not a ride")
	require.Contains(t, string(body), "the body is not a ride's JSON")
	status, body = postRide(t, srv.URL, "")
	require.Equal(t, http.StatusBadRequest, status, "no Idempotency-Key")
	require.Contains(t, string(body), "an Idempotency-Key header is required")
	require.Equal(t, 2, fake.Stats().ChargeRequests, "no charge for garbage")
	require.Equal(t, []int64{2, 2, 2, 2, 2}, rows(), "nothing written for garbage")

	require.Equal(t, "2\n", ridesSoFar(t, srv.URL))
}
