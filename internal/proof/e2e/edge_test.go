package e2e_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet/fleettest"
)

// TestHTTPEdge sends what a hostile client sends to the api process, as
// make dev and a deployment run it, and reads the answers off the wire.
func TestHTTPEdge(t *testing.T) {
	t.Parallel()
	s := newStack(t, dbtest.NewURL(t))
	api := fleettest.Start(t, s.fleet, "api")
	addr := strings.TrimPrefix(api.URL, "http://")

	// roundTrip writes raw on a new connection and reads the answers:
	// each request's status and code, and whether the api then closed
	// the connection.
	roundTrip := func(t *testing.T, raw string, answers int) (statuses []int, bodies []string, closed bool) {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer conn.Close()
		_, err = io.WriteString(conn, raw)
		require.NoError(t, err)
		br := bufio.NewReader(conn)
		for range answers {
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				break
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			statuses, bodies = append(statuses, resp.StatusCode), append(bodies, string(body))
		}
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, err = br.ReadByte()
		return statuses, bodies, err == io.EOF
	}

	// A proxy that trusts Content-Length reads this as one POST whose
	// body is "0\r\n\r\nGET /rides...", the api as a POST with an empty
	// chunked body followed by a GET: the GET, smuggled past the proxy,
	// used to be answered on the connection the api kept open.
	t.Run("RefusesContentLengthWithTransferEncodingAndCloses", func(t *testing.T) {
		t.Parallel()
		smuggled := "GET /rides HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer " + s.token + "\r\n\r\n"
		raw := fmt.Sprintf("POST /rides HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer %s\r\nIdempotency-Key: %s\r\n"+
			"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n%s",
			s.token, uuid.NewString(), len("0\r\n\r\n")+len(smuggled), smuggled)
		statuses, bodies, closed := roundTrip(t, raw, 2)
		require.Equal(t, []int{http.StatusBadRequest}, statuses, "%q", bodies)
		require.Contains(t, bodies[0], `"code":"ambiguous_framing"`)
		require.True(t, closed, "the connection is closed: the smuggled GET is never answered")
	})

	// A client that sends one length is served as before, on a
	// connection kept open.
	t.Run("ServesChunkedBodiesAsBefore", func(t *testing.T) {
		t.Parallel()
		body := rideParams
		raw := fmt.Sprintf("POST /rides HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer %s\r\nIdempotency-Key: %s\r\n"+
			"Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"+
			"GET /healthz HTTP/1.1\r\nHost: api\r\n\r\n",
			s.token, uuid.NewString(), len(body), body)
		statuses, bodies, closed := roundTrip(t, raw, 2)
		require.Equal(t, []int{http.StatusCreated, http.StatusOK}, statuses, "%q", bodies)
		require.False(t, closed)
	})

	// ?status= and ?limit= used to be taken for absent: every ride, the
	// default page.
	t.Run("RefusesEmptyQueryValues", func(t *testing.T) {
		t.Parallel()
		for _, query := range []string{"status=", "limit=", "starting_after=", "limit"} {
			req, err := http.NewRequest(http.MethodGet, api.URL+"/rides?"+query, nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+s.token)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", query, body)
			require.Contains(t, string(body), `"code":"invalid_query"`, query)
		}
	})

	// Answers about one user's payments used to say nothing of caching
	// or of sniffing their type.
	t.Run("EveryAnswerIsNoStoreAndNosniff", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct{ method, path, token string }{
			{http.MethodGet, "/rides", s.token},
			{http.MethodHead, "/rides", s.token},
			{http.MethodGet, "/rides/1", s.token},
			{http.MethodGet, "/rides", "wrong"},
			{http.MethodPost, "/rides", s.token},
			{http.MethodGet, "/healthz", ""},
			{http.MethodGet, "/openapi.yaml", ""},
			{http.MethodGet, "/nowhere", ""},
		} {
			req, err := http.NewRequest(tc.method, api.URL+tc.path, nil)
			require.NoError(t, err)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			where := fmt.Sprintf("%s %s answered %d", tc.method, tc.path, resp.StatusCode)
			require.Equal(t, "no-store", resp.Header.Get("Cache-Control"), where)
			require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), where)
		}
	})
}
