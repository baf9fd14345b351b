package problem_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/problem"
)

func TestTitle(t *testing.T) {
	t.Parallel()

	// RFC 9110, section 15: the reason phrases of the statuses net/http
	// still names after RFC 7231, and a few it already gets right.
	for status, want := range map[int]string{
		http.StatusRequestEntityTooLarge:        "Content Too Large",
		http.StatusRequestURITooLong:            "URI Too Long",
		http.StatusRequestedRangeNotSatisfiable: "Range Not Satisfiable",
		http.StatusUnprocessableEntity:          "Unprocessable Content",
		http.StatusUnsupportedMediaType:         "Unsupported Media Type",
		http.StatusBadRequest:                   "Bad Request",
		http.StatusNotFound:                     "Not Found",
		http.StatusServiceUnavailable:           "Service Unavailable",
	} {
		require.Equal(t, want, problem.Title(status), "status %d", status)
		require.Equal(t, want, problem.New(status, "code", "").Title, "status %d", status)
	}

	rec := httptest.NewRecorder()
	problem.New(http.StatusUnprocessableEntity, "invalid_params", "").Write(rec)
	var body map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	require.Equal(t, "Unprocessable Content", body["title"])
}

func TestClip(t *testing.T) {
	t.Parallel()

	t.Run("KeepsShortStrings", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, problem.Clip(""))
		require.Equal(t, "/no/such/path", problem.Clip("/no/such/path"))
		exact := strings.Repeat("x", problem.MaxClip)
		require.Equal(t, exact, problem.Clip(exact))
	})

	t.Run("CutsAndMarksLongStrings", func(t *testing.T) {
		t.Parallel()
		got := problem.Clip(strings.Repeat("x", 900<<10))
		require.Equal(t, strings.Repeat("x", problem.MaxClip)+"…", got)
	})

	t.Run("CutsOnACharacterBoundary", func(t *testing.T) {
		t.Parallel()
		// "é" is two bytes: the 256th byte would split one.
		got := problem.Clip("x" + strings.Repeat("é", problem.MaxClip))
		require.True(t, utf8.ValidString(got), "%q", got)
		require.LessOrEqual(t, len(got), problem.MaxClip+len("…"))
		require.True(t, strings.HasSuffix(got, "é…"), "%q", got)
	})

	t.Run("CutsInvalidUTF8Anywhere", func(t *testing.T) {
		t.Parallel()
		got := problem.Clip(strings.Repeat("\x80", 1000))
		require.Equal(t, strings.Repeat("\x80", problem.MaxClip)+"…", got)
	})
}

func TestWith(t *testing.T) {
	t.Parallel()

	t.Run("AddsExtensionMembers", func(t *testing.T) {
		t.Parallel()
		p := problem.New(http.StatusServiceUnavailable, "payment_unavailable", "Retry.").With("ride_id", int64(42))
		var got map[string]any
		require.NoError(t, json.Unmarshal(p.JSON(), &got))
		require.Equal(t, map[string]any{
			"type":    "/errors#payment_unavailable",
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
		require.JSONEq(t, `{"type":"/errors#not_found","title":"Not Found","status":404,"code":"not_found"}`,
			string(p.JSON()))
	})
}

func TestShouldRetryHeader(t *testing.T) {
	t.Parallel()

	// The retry protocol of docs/openapi.yaml, status by status.
	for status, want := range map[int]string{
		http.StatusBadRequest: "false", http.StatusUnauthorized: "false", http.StatusPaymentRequired: "false",
		http.StatusNotFound: "false", http.StatusRequestTimeout: "true", http.StatusConflict: "true",
		http.StatusGone: "false", http.StatusUnprocessableEntity: "false", http.StatusTooManyRequests: "true",
		http.StatusInternalServerError: "true", http.StatusBadGateway: "false", http.StatusServiceUnavailable: "true",
	} {
		rec := httptest.NewRecorder()
		problem.New(status, "code", "").Write(rec)
		require.Equal(t, want, rec.Header().Get(problem.ShouldRetryHeader), "status %d", status)
	}

	t.Run("FinalOverridesTheStatus", func(t *testing.T) {
		t.Parallel()
		rec := httptest.NewRecorder()
		p := problem.New(http.StatusInternalServerError, "internal_error", "")
		p.Final = true
		p.Write(rec)
		require.Equal(t, "false", rec.Header().Get(problem.ShouldRetryHeader))
	})
}
