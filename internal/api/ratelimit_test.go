package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/ratelimit"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

// TestRateLimits is the api's edge with its limits on, in process, every
// answer checked against docs/openapi.yaml: a 429 on each ride route,
// GET, HEAD and POST alike. (Across two api processes:
// internal/proof/e2e, TestRateLimitsAcrossProcesses.)
func TestRateLimits(t *testing.T) {
	t.Parallel()

	t.Run("RefusesATokenPastItsRequests", func(t *testing.T) {
		t.Parallel()
		b := apitest.New(t, apitest.Options{TokenLimit: ratelimit.Policy{Name: ratelimit.TokenPolicy, Quota: 2, Window: time.Minute}})
		auth := []string{"Authorization", "Bearer " + b.Token}
		require.Equal(t, http.StatusOK, b.Do(t, http.MethodGet, "/rides", "", auth...).Status)
		require.Equal(t, http.StatusOK, b.Do(t, http.MethodHead, "/rides", "", auth...).Status)
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			for _, path := range []string{"/rides", "/rides/1"} {
				resp := b.Do(t, method, path, "", auth...)
				require.Equal(t, http.StatusTooManyRequests, resp.Status, "%s %s", method, path)
				require.Equal(t, `"token";q=2;w=60`, resp.Header.Get("RateLimit-Policy"))
				require.Regexp(t, `^"token";r=0;t=[0-9]+$`, resp.Header.Get("RateLimit"))
			}
		}
		resp := b.PostRide(t, apitest.NewKey(), apitest.DefaultParams)
		require.Equal(t, http.StatusTooManyRequests, resp.Status)
		require.Equal(t, "rate_limited", resp.JSON(t)["code"])
		require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys`), "nothing was done")
		// /healthz and the description are no one's requests.
		require.Equal(t, http.StatusOK, b.Do(t, http.MethodGet, "/healthz", "", auth...).Status)
	})

	t.Run("RefusesAnAddressPastItsFailedAuthentications", func(t *testing.T) {
		t.Parallel()
		b := apitest.New(t, apitest.Options{FailedAuthLimit: ratelimit.Policy{Name: ratelimit.FailedAuthPolicy, Quota: 2, Window: time.Minute}})
		require.Equal(t, http.StatusUnauthorized, b.Do(t, http.MethodGet, "/rides", "", "Authorization", "Bearer wrong").Status)
		require.Equal(t, http.StatusUnauthorized, b.Do(t, http.MethodGet, "/rides", "").Status)
		for _, auth := range [][]string{{"Authorization", "Bearer wrong"}, {"Authorization", "Bearer " + b.Token}, nil} {
			resp := b.Do(t, http.MethodGet, "/rides", "", auth...)
			require.Equal(t, http.StatusTooManyRequests, resp.Status)
			require.Equal(t, `"failed_auth";q=2;w=60`, resp.Header.Get("RateLimit-Policy"))
			require.Empty(t, resp.Header.Get("WWW-Authenticate"), "not a 401")
		}
	})
}
