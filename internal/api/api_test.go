package api_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/api"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

func TestRouting(t *testing.T) {
	t.Parallel()
	b := apitest.New(t, apitest.Options{})

	t.Run("UnknownPathIsNotFound", func(t *testing.T) {
		t.Parallel()
		resp := b.Do(t, http.MethodGet, "/no/such/endpoint", "")
		require.Equal(t, http.StatusNotFound, resp.Status)
		require.Equal(t, "not_found", resp.JSON(t)["code"])
	})

	// RFC 9110, section 15.5.6: a 405 lists the methods that are allowed.
	// HEAD is among them wherever GET is.
	t.Run("UnsupportedMethodListsTheAllowedOnes", func(t *testing.T) {
		t.Parallel()
		resp := b.Do(t, http.MethodDelete, "/rides", "", "Authorization", "Bearer "+b.Token)
		require.Equal(t, http.StatusMethodNotAllowed, resp.Status)
		require.Equal(t, "method_not_allowed", resp.JSON(t)["code"])
		require.Equal(t, "GET, HEAD, POST", resp.Header.Get("Allow"))

		resp = b.Do(t, http.MethodPost, "/rides/1", "")
		require.Equal(t, http.StatusMethodNotAllowed, resp.Status)
		require.Equal(t, "GET, HEAD", resp.Header.Get("Allow"))
	})

	// Load balancers check health with HEAD; it used to be a 405.
	t.Run("HeadOnGetRoutes", func(t *testing.T) {
		t.Parallel()
		for _, path := range []string{"/healthz", "/readyz"} {
			resp := b.Do(t, http.MethodHead, path, "")
			require.Equal(t, http.StatusOK, resp.Status, path)
			require.Empty(t, resp.Body, path)
			require.Equal(t, "text/plain", resp.Header.Get("Content-Type"), path)
			require.NotEmpty(t, resp.Header.Get("Request-Id"), path)
		}
	})

	// A HEAD on a ride route answers what its GET would, without the body.
	t.Run("HeadOnRideRoutes", func(t *testing.T) {
		t.Parallel()
		b := apitest.New(t, apitest.Options{})
		created := b.PostRide(t, "head-on-ride-routes-0001", "origin_lat=1&origin_lon=2&target_lat=3&target_lon=4")
		require.Equal(t, http.StatusCreated, created.Status)
		auth := []string{"Authorization", "Bearer " + b.Token}
		for path, want := range map[string]int{
			"/rides": http.StatusOK,
			"/rides/" + strconv.FormatInt(int64(created.JSON(t)["id"].(float64)), 10): http.StatusOK,
			"/rides/999999999": http.StatusNotFound,
		} {
			resp := b.Do(t, http.MethodHead, path, "", auth...)
			require.Equal(t, want, resp.Status, path)
			require.Empty(t, resp.Body, path)
		}
	})

	// /metrics is unauthenticated: it is served on a listener of its own
	// (METRICS_ADDR), never on the public port.
	t.Run("NoMetricsOnThePublicPort", func(t *testing.T) {
		t.Parallel()
		resp := b.Do(t, http.MethodGet, "/metrics", "")
		require.Equal(t, http.StatusNotFound, resp.Status)
		require.Equal(t, "not_found", resp.JSON(t)["code"])
	})

	t.Run("NoProfilesOnThePublicPort", func(t *testing.T) {
		t.Parallel()
		resp := b.Do(t, http.MethodGet, "/debug/pprof/", "")
		require.Equal(t, http.StatusNotFound, resp.Status)
	})
}

func TestNew(t *testing.T) {
	t.Parallel()
	b := apitest.New(t, apitest.Options{})
	ridesHandler, err := rides.NewHandler(&rides.HandlerConfig{Service: b.Service, Pool: b.Pool})
	require.NoError(t, err)
	for want, config := range map[string]*api.Config{
		"api: Config is required":       nil,
		"api: Config.Pool is required":  {Rides: ridesHandler},
		"api: Config.Rides is required": {Pool: b.Pool},
	} {
		_, err := api.New(config)
		require.ErrorContains(t, err, want)
	}
	_, err = api.New(&api.Config{Pool: b.Pool, Rides: ridesHandler})
	require.NoError(t, err)
}
