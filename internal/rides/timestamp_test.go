package rides_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

func TestTimestamp(t *testing.T) {
	t.Parallel()

	t.Run("AlwaysSixFractionalDigitsInUTC", func(t *testing.T) {
		t.Parallel()
		pacific := time.FixedZone("PDT", -7*60*60)
		for want, in := range map[string]time.Time{
			`"2024-05-01T12:00:00.000000Z"`: time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC),
			`"2024-05-01T12:00:00.120000Z"`: time.Date(2024, 5, 1, 12, 0, 0, 120_000_000, time.UTC),
			`"2024-05-01T12:00:00.123456Z"`: time.Date(2024, 5, 1, 12, 0, 0, 123_456_789, time.UTC),
			`"2024-05-01T19:00:00.000001Z"`: time.Date(2024, 5, 1, 12, 0, 0, 1_000, pacific),
		} {
			b, err := json.Marshal(rides.Timestamp{Time: in})
			require.NoError(t, err)
			require.Equal(t, want, string(b))
		}
	})

	t.Run("RoundTrips", func(t *testing.T) {
		t.Parallel()
		in := rides.Timestamp{Time: time.Date(2024, 5, 1, 12, 0, 0, 10_000, time.UTC)}
		b, err := json.Marshal(in)
		require.NoError(t, err)
		var out rides.Timestamp
		require.NoError(t, json.Unmarshal(b, &out))
		require.True(t, in.Equal(out.Time), "%s", b)
	})

	// A ride created on a whole second, as Postgres stores it, reads back
	// with its six digits in both the ride and the list.
	t.Run("RideCreatedAt", func(t *testing.T) {
		t.Parallel()
		b := apitest.New(t, apitest.Options{})
		created := b.PostRide(t, apitest.NewKey(), apitest.DefaultParams)
		require.Equal(t, http.StatusCreated, created.Status, "%s", created.Body)
		require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`, created.JSON(t)["created_at"])
		id := int64(created.JSON(t)["id"].(float64))

		_, err := b.Pool.Exec(context.Background(),
			`UPDATE rides SET created_at = '2024-05-01 12:00:00+00' WHERE id = $1`, id)
		require.NoError(t, err)
		ride := b.Do(t, http.MethodGet, fmt.Sprintf("/rides/%d", id), "", "Authorization", "Bearer "+b.Token)
		require.Equal(t, http.StatusOK, ride.Status, "%s", ride.Body)
		require.Equal(t, "2024-05-01T12:00:00.000000Z", ride.JSON(t)["created_at"])

		list := b.Do(t, http.MethodGet, "/rides", "", "Authorization", "Bearer "+b.Token)
		require.Equal(t, http.StatusOK, list.Status, "%s", list.Body)
		require.Contains(t, string(list.Body), `"created_at":"2024-05-01T12:00:00.000000Z"`)
	})
}
