package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/api"
	"github.com/rocketrides/rocketrides/internal/platform/problem"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

// hostileInput is a request a hostile client sends, and the precise
// answer it must get.
type hostileInput struct {
	name   string
	method string
	path   string
	body   string
	// headers are name/value pairs; "$token" stands for the user's API
	// token and "$key" for a fresh idempotency key.
	headers []string
	status  int
	code    string
	// check, when set, looks further at the answer.
	check func(t *testing.T, resp *apitest.Response)
}

// rfc9110Titles are the reason phrases RFC 9110 gives the statuses a
// hostile input gets.
var rfc9110Titles = map[int]string{
	http.StatusBadRequest:            "Bad Request",
	http.StatusUnauthorized:          "Unauthorized",
	http.StatusNotFound:              "Not Found",
	http.StatusMethodNotAllowed:      "Method Not Allowed",
	http.StatusRequestEntityTooLarge: "Content Too Large",
	http.StatusUnsupportedMediaType:  "Unsupported Media Type",
	http.StatusUnprocessableEntity:   "Unprocessable Content",
}

const (
	form    = "application/x-www-form-urlencoded"
	huge    = 900 << 10 // under net/http's 1 MB limit on the header section
	largish = 60 << 10  // under the 64 KiB body limit
)

// ridePost is the header set of an otherwise acceptable POST /rides.
func ridePost(contentType string, more ...string) []string {
	return append([]string{"Authorization", "Bearer $token", "Idempotency-Key", "$key", "Content-Type", contentType}, more...)
}

// fields joins n form fields named prefix0000, prefix0001, ...
func fields(prefix string, n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("%s%04d=1", prefix, i)
	}
	return strings.Join(parts, "&")
}

// hostileInputs are the bad requests of the hostile-client probe that
// reach the API itself (the body and parameter checks of POST /rides
// have their own table in package rides, TestCreateRideRejectsBadInput).
var hostileInputs = []hostileInput{
	// Client strings echoed or logged whole (issue item 6).
	{name: "HugeUnknownPath", method: http.MethodGet, path: "/" + strings.Repeat("a", huge),
		status: 404, code: "not_found", check: detailClipped},
	{name: "HugeUnknownPathWithBody", method: http.MethodPost, path: "/" + strings.Repeat("é", huge/6), body: apitest.DefaultParams,
		status: 404, code: "not_found", check: detailClipped},
	{name: "HugeMethod", method: strings.Repeat("M", largish), path: "/rides",
		status: 405, code: "method_not_allowed", check: detailClipped},
	{name: "HugeRequestID", method: http.MethodPost, path: "/rides", body: apitest.DefaultParams,
		headers: []string{"X-Request-Id", strings.Repeat("r", huge), "Content-Type", form}, status: 401, code: "unauthorized"},
	{name: "SpoofedRequestID", method: http.MethodPost, path: "/rides", body: apitest.DefaultParams,
		headers: ridePost(form, "X-Request-Id", "req_0123456789ab_1", "Idempotency-Key", "short"), status: 400, code: "idempotency_key_invalid",
		check: func(t *testing.T, resp *apitest.Response) {
			require.NotEqual(t, "req_0123456789ab_1", resp.Header.Get("Request-Id"))
		}},
	{name: "HugeBearerToken", method: http.MethodGet, path: "/rides",
		headers: []string{"Authorization", "Bearer " + strings.Repeat("t", huge)}, status: 401, code: "unauthorized"},
	{name: "HugeIdempotencyKey", method: http.MethodPost, path: "/rides", body: apitest.DefaultParams,
		headers: []string{"Authorization", "Bearer $token", "Idempotency-Key", strings.Repeat("k", huge), "Content-Type", form},
		status:  400, code: "idempotency_key_invalid"},
	{name: "HugeContentType", method: http.MethodPost, path: "/rides", body: apitest.DefaultParams,
		headers: ridePost("text/" + strings.Repeat("c", huge)), status: 415, code: "unsupported_media_type", check: detailClipped},
	{name: "HugeContentTypeParameter", method: http.MethodPost, path: "/rides", body: apitest.DefaultParams,
		headers: ridePost(`text/plain; x="` + strings.Repeat("c", huge) + `"`), status: 415, code: "unsupported_media_type", check: detailClipped},
	{name: "HugeUnknownFieldName", method: http.MethodPost, path: "/rides", body: `{"` + strings.Repeat("n", largish) + `": 1}`,
		headers: ridePost("application/json"), status: 422, code: "invalid_params", check: detailClipped},
	{name: "HugeUnknownFormName", method: http.MethodPost, path: "/rides", body: apitest.DefaultParams + "&" + strings.Repeat("n", largish) + "=1",
		headers: ridePost(form), status: 422, code: "invalid_params", check: listed(1, 0)},
	{name: "InvalidUTF8FormName", method: http.MethodPost, path: "/rides", body: apitest.DefaultParams + "&%ff%fe=1",
		headers: ridePost(form), status: 422, code: "invalid_params", check: listed(1, 0)},

	// Error lists (item 7).
	{name: "EightThousandUnknownFields", method: http.MethodPost, path: "/rides", body: fields("f", 8000),
		headers: ridePost(form), status: 422, code: "invalid_params", check: listed(rides.MaxInvalidParams, 8004-rides.MaxInvalidParams)},
	{name: "FiveThousandUnknownJSONFields", method: http.MethodPost, path: "/rides",
		body:    "{" + jsonFields(5000) + "}",
		headers: ridePost("application/json"), status: 422, code: "invalid_params", check: listed(rides.MaxInvalidParams, 5004-rides.MaxInvalidParams)},
	{name: "ThousandsOfRepeatedParam", method: http.MethodPost, path: "/rides",
		body:    apitest.DefaultParams + strings.Repeat("&origin_lat=1", 5000),
		headers: ridePost(form), status: 422, code: "invalid_params", check: listed(1, 0)},
	{name: "ThousandsOfDuplicateJSONKeys", method: http.MethodPost, path: "/rides",
		body:    `{"origin_lon":0,"target_lat":0,"target_lon":0` + strings.Repeat(`,"origin_lat":1`, 4000) + "}",
		headers: ridePost("application/json"), status: 422, code: "invalid_params", check: listed(1, 0)},

	// Headers and bodies the API used to take as something else (item 8).
	{name: "GzipContentEncoding", method: http.MethodPost, path: "/rides", body: apitest.DefaultParams,
		headers: ridePost(form, "Content-Encoding", "gzip"), status: 415, code: "unsupported_content_encoding", check: names("gzip")},
	{name: "CodingList", method: http.MethodPost, path: "/rides", body: `{"origin_lat":1,"origin_lon":1,"target_lat":1,"target_lon":1}`,
		headers: ridePost("application/json", "Content-Encoding", "identity, br"), status: 415, code: "unsupported_content_encoding", check: names("br")},
	{name: "SecondContentEncodingHeader", method: http.MethodPost, path: "/rides", body: apitest.DefaultParams,
		headers: ridePost(form, "Content-Encoding", "identity", "Content-Encoding", "deflate"), status: 415, code: "unsupported_content_encoding", check: names("deflate")},
	{name: "HugeContentEncoding", method: http.MethodPost, path: "/rides", body: apitest.DefaultParams,
		headers: ridePost(form, "Content-Encoding", strings.Repeat("z", huge)), status: 415, code: "unsupported_content_encoding", check: detailClipped},
	{name: "ContentEncodingWithoutAuth", method: http.MethodPost, path: "/rides", body: apitest.DefaultParams,
		headers: []string{"Content-Type", form, "Content-Encoding", "gzip"}, status: 415, code: "unsupported_content_encoding"},
	{name: "TwoAuthorizationHeaders", method: http.MethodGet, path: "/rides",
		headers: []string{"Authorization", "Bearer $token", "Authorization", "Bearer $token"}, status: 401, code: "unauthorized", check: names("once")},
	{name: "BadThenGoodAuthorization", method: http.MethodPost, path: "/rides", body: apitest.DefaultParams,
		headers: append([]string{"Authorization", "Bearer nope"}, ridePost(form)...), status: 401, code: "unauthorized"},
	{name: "GoodThenBadAuthorization", method: http.MethodGet, path: "/rides/1",
		headers: []string{"Authorization", "Bearer $token", "Authorization", "Basic Zm9vOmJhcg=="}, status: 401, code: "unauthorized"},
	{name: "OversizedByContentLength", method: http.MethodPost, path: "/rides", body: strings.Repeat("x", api.MaxBodyBytes+1),
		headers: ridePost(form), status: 413, code: "body_too_large"},
	{name: "OversizedWithoutAuth", method: http.MethodPost, path: "/rides", body: strings.Repeat("x", api.MaxBodyBytes+1),
		status: 413, code: "body_too_large"},

	// The rest of the probe.
	{name: "RideIDOverflow", method: http.MethodGet, path: "/rides/99999999999999999999",
		headers: []string{"Authorization", "Bearer $token"}, status: 404, code: "ride_not_found"},
	{name: "NegativeRideID", method: http.MethodGet, path: "/rides/-1",
		headers: []string{"Authorization", "Bearer $token"}, status: 404, code: "ride_not_found"},
	{name: "NULInRideID", method: http.MethodGet, path: "/rides/1%00",
		headers: []string{"Authorization", "Bearer $token"}, status: 404, code: "ride_not_found"},
	{name: "DeeplyNestedJSON", method: http.MethodPost, path: "/rides", body: `{"origin_lat":` + strings.Repeat("[", largish),
		headers: ridePost("application/json"), status: 400, code: "malformed_body"},
	{name: "JSONWithTrailingObject", method: http.MethodPost, path: "/rides",
		body:    `{"origin_lat":1,"origin_lon":1,"target_lat":1,"target_lon":1} {}`,
		headers: ridePost("application/json"), status: 400, code: "malformed_body"},
	{name: "JSONWithByteOrderMark", method: http.MethodPost, path: "/rides",
		body:    "\ufeff" + `{"origin_lat":1,"origin_lon":1,"target_lat":1,"target_lon":1}`,
		headers: ridePost("application/json"), status: 400, code: "malformed_body"},
	{name: "EmptyJSONObject", method: http.MethodPost, path: "/rides", body: `{}`,
		headers: ridePost("application/json"), status: 422, code: "invalid_params", check: listed(4, 0)},
	{name: "HugeNumber", method: http.MethodPost, path: "/rides",
		body:    `{"origin_lat":1` + strings.Repeat("0", largish) + `,"origin_lon":1,"target_lat":1,"target_lon":1}`,
		headers: ridePost("application/json"), status: 422, code: "invalid_params", check: listed(1, 0)},
	{name: "BearerWithoutToken", method: http.MethodGet, path: "/rides",
		headers: []string{"Authorization", "Bearer "}, status: 401, code: "unauthorized"},
	{name: "TraceMethod", method: http.MethodTrace, path: "/rides", status: 405, code: "method_not_allowed"},
}

func jsonFields(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"f%04d":1`, i)
	}
	return strings.Join(parts, ",")
}

// detailClipped checks that the answer quotes no client string whole.
func detailClipped(t *testing.T, resp *apitest.Response) {
	t.Helper()
	detail, _ := resp.JSON(t)["detail"].(string)
	require.Less(t, len(detail), problem.MaxClip+200, "%.1000s", detail)
	list, _ := resp.JSON(t)["invalid_params"].([]any)
	for _, ip := range list {
		require.LessOrEqual(t, len(ip.(map[string]any)["name"].(string)), problem.MaxClip+len("…"))
	}
}

// listed checks that invalid_params holds n parameters, each once, and
// that detail counts those left out.
func listed(n, more int) func(*testing.T, *apitest.Response) {
	return func(t *testing.T, resp *apitest.Response) {
		t.Helper()
		detailClipped(t, resp)
		p := resp.JSON(t)
		list := p["invalid_params"].([]any)
		require.Len(t, list, n)
		seen := map[string]bool{}
		for _, ip := range list {
			name := ip.(map[string]any)["name"].(string)
			require.False(t, seen[name], "%q listed twice", name)
			seen[name] = true
		}
		if more > 0 {
			require.Contains(t, p["detail"], fmt.Sprintf("and %d more", more))
		} else {
			require.NotContains(t, p["detail"], "more")
		}
	}
}

// names checks that detail names what was refused.
func names(what string) func(*testing.T, *apitest.Response) {
	return func(t *testing.T, resp *apitest.Response) {
		t.Helper()
		require.Contains(t, resp.JSON(t)["detail"], what)
	}
}

// TestHostileInputs sends every hostile input and checks that each gets a
// precise 4xx with an RFC 9110 title, a small answer, a request id of the
// server's, a bounded log line, and that none of them wrote anything.
func TestHostileInputs(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	b := apitest.New(t, apitest.Options{LogOutput: logs})

	t.Run("Inputs", func(t *testing.T) {
		for _, in := range hostileInputs {
			t.Run(in.name, func(t *testing.T) {
				t.Parallel()
				headers := make([]string, len(in.headers))
				for i, h := range in.headers {
					switch h {
					case "Bearer $token":
						h = "Bearer " + b.Token
					case "$key":
						h = apitest.NewKey()
					}
					headers[i] = h
				}
				resp := b.Do(t, in.method, in.path, in.body, headers...)
				require.Equal(t, in.status, resp.Status, "%.2000s", resp.Body)
				require.Equal(t, problem.ContentType, resp.Header.Get("Content-Type"))
				p := resp.JSON(t)
				require.Equal(t, in.code, p["code"], "%.2000s", resp.Body)
				require.EqualValues(t, in.status, p["status"])
				require.Equal(t, rfc9110Titles[in.status], p["title"])
				require.Less(t, len(resp.Body), 4<<10, "a small answer")
				require.Regexp(t, `^req_[0-9a-f]{12}_[0-9]+$`, resp.Header.Get("Request-Id"))
				if in.check != nil {
					in.check(t, resp)
				}
			})
		}
	})

	// After every input has been answered: nothing was written, nothing
	// was charged, and no log line grew with the input.
	require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys`))
	require.Zero(t, b.Count(t, `SELECT count(*) FROM rides`))
	require.Zero(t, b.Count(t, `SELECT count(*) FROM audit_records`))
	require.Zero(t, b.Count(t, `SELECT count(*) FROM staged_jobs`))
	require.Equal(t, 2, b.Count(t, `SELECT count(*) FROM users`))
	require.Zero(t, b.Stripe.Stats().ChargeRequests)
	lines := logs.lines()
	require.GreaterOrEqual(t, len(lines), len(hostileInputs))
	for _, line := range lines {
		require.Less(t, len(line), 2<<10, "%.2000s", line)
	}
}
