package rides_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/problem"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

// invalidParams is a problem's invalid_params, one "name reason" a line.
func invalidParams(t *testing.T, resp *apitest.Response) string {
	t.Helper()
	var lines []string
	list, _ := resp.JSON(t)["invalid_params"].([]any)
	for _, ip := range list {
		m := ip.(map[string]any)
		lines = append(lines, fmt.Sprintf("%s %s", m["name"], m["reason"]))
	}
	return strings.Join(lines, "\n")
}

func TestInvalidParamsList(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		*apitest.Stack
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{Stack: apitest.New(t, apitest.Options{})}
	}
	post := func(t *testing.T, b *testBundle, contentType, body string) *apitest.Response {
		t.Helper()
		return b.Do(t, http.MethodPost, "/rides", body,
			"Authorization", "Bearer "+b.Token, "Idempotency-Key", apitest.NewKey(), "Content-Type", contentType)
	}

	// The answer to 8,000 unknown fields used to be 700 KB, each name in
	// it twice (detail and invalid_params).
	t.Run("ListsTheFirstAndCountsTheRest", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		fields := make([]string, 8000)
		for i := range fields {
			fields[i] = fmt.Sprintf("f%04d=1", i)
		}
		body := strings.Join(fields, "&")
		require.Less(t, len(body), 64<<10)

		resp := post(t, b, formType, body)
		require.Equal(t, http.StatusUnprocessableEntity, resp.Status, "%s", resp.Body)
		require.Less(t, len(resp.Body), 4<<10, "the answer is small")
		p := resp.JSON(t)
		require.Equal(t, "invalid_params", p["code"])
		require.Len(t, p["invalid_params"], rides.MaxInvalidParams)
		require.Equal(t, "8004 parameters are invalid; invalid_params lists the first 20, and 7984 more", p["detail"])
		// The four missing coordinates come first, then the unknown
		// fields in order.
		lines := strings.Split(invalidParams(t, resp), "\n")
		require.Equal(t, "origin_lat is required", lines[0])
		require.Equal(t, "f0000 is not a known parameter", lines[4])
		require.Equal(t, "f0015 is not a known parameter", lines[19])
		for _, name := range []string{"origin_lat", "f0000", "f0015"} {
			require.Equal(t, 1, strings.Count(string(resp.Body), `"`+name+`"`), "%s is listed once", name)
		}
		require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys`))
	})

	t.Run("NamesEachParameterOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp := post(t, b, formType, "origin_lat=91&origin_lon=0&target_lat=0&target_lon=0&tip=1")
		require.Equal(t, http.StatusUnprocessableEntity, resp.Status, "%s", resp.Body)
		require.Equal(t, "2 parameters are invalid; invalid_params says which and why", resp.JSON(t)["detail"])
		require.Equal(t, "origin_lat must be between -90 and 90\ntip is not a known parameter", invalidParams(t, resp))
		require.Equal(t, 1, strings.Count(string(resp.Body), "origin_lat"))
		require.Equal(t, 1, strings.Count(string(resp.Body), "tip"))
	})

	t.Run("ClipsAnUnknownName", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		name := strings.Repeat("n", 60<<10)
		resp := post(t, b, "application/json", `{"`+name+`": 1}`)
		require.Equal(t, http.StatusUnprocessableEntity, resp.Status)
		require.Less(t, len(resp.Body), 2<<10)
		require.Contains(t, invalidParams(t, resp), problem.Clip(name)+" is not a known parameter")
	})

	t.Run("ClipsAContentType", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp := post(t, b, "text/"+strings.Repeat("x", 60<<10), apitest.DefaultParams)
		require.Equal(t, http.StatusUnsupportedMediaType, resp.Status)
		require.Less(t, len(resp.Body), 2<<10)
		require.Equal(t, "unsupported_media_type", resp.JSON(t)["code"])
	})
}
