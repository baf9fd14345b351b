package problem_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/problem"
)

func TestWith(t *testing.T) {
	t.Parallel()

	t.Run("AddsExtensionMembers", func(t *testing.T) {
		t.Parallel()
		p := problem.New(http.StatusServiceUnavailable, "payment_unavailable", "Retry.").With("ride_id", int64(42))
		var got map[string]any
		require.NoError(t, json.Unmarshal(p.JSON(), &got))
		require.Equal(t, map[string]any{
			"type":    "https://docs.rocketrides.local/errors#payment_unavailable",
			"title":   http.StatusText(http.StatusServiceUnavailable),
			"status":  float64(503),
			"detail":  "Retry.",
			"code":    "payment_unavailable",
			"ride_id": float64(42),
		}, got)
	})

	t.Run("NoneLeavesTheDocumentAsItWas", func(t *testing.T) {
		t.Parallel()
		p := problem.New(http.StatusNotFound, "not_found", "")
		require.JSONEq(t, `{"type":"https://docs.rocketrides.local/errors#not_found","title":"Not Found","status":404,"code":"not_found"}`,
			string(p.JSON()))
	})
}
