package serve_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/problem"
	"github.com/rocketrides/rocketrides/internal/platform/serve"
)

// Requests as a hostile client writes them on one connection, one after
// the other; each reads its whole body, as the api's POST /rides does.
const (
	plainPost   = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
	chunkedPost = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n"
	// Two lengths: net/http reads the chunks, a proxy trusting
	// Content-Length would read 4 bytes ("0\r\n\r") and take the rest
	// for the start of the next request.
	smuggling   = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
	getOK       = "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n"
	optionsStar = "OPTIONS * HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
)

// TestAmbiguousFraming sends requests over a raw connection to a real
// server and reads what it answers, and whether it then closes.
func TestAmbiguousFraming(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) string {
		t.Helper()
		mux := http.NewServeMux()
		mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			_, _ = io.WriteString(w, "read "+string(body))
		})
		srv, err := serve.Listen(&serve.Config{Name: "test", Addr: "127.0.0.1:0", Handler: mux,
			Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx) }()
		t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
		return srv.Addr()
	}

	// exchange writes requests on one connection and reads the answers
	// to them until the server closes it or stops answering: their
	// statuses, and whether the connection was closed.
	exchange := func(t *testing.T, addr string, requests ...string) (statuses []int, bodies []string, closed bool) {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer conn.Close()
		_, err = io.WriteString(conn, strings.Join(requests, ""))
		require.NoError(t, err)
		br := bufio.NewReader(conn)
		for range requests {
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(2*time.Second)))
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				break
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			statuses = append(statuses, resp.StatusCode)
			bodies = append(bodies, string(body))
			if resp.Close {
				break
			}
		}
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(2*time.Second)))
		_, err = br.ReadByte()
		return statuses, bodies, err == io.EOF
	}

	t.Run("ServesOneLengthAndKeepsTheConnection", func(t *testing.T) {
		t.Parallel()
		statuses, bodies, closed := exchange(t, setup(t), plainPost, chunkedPost, getOK)
		require.Equal(t, []int{200, 200, 200}, statuses)
		require.Equal(t, []string{"read hello", "read hello", "read "}, bodies)
		require.False(t, closed)
	})

	// net/http used to answer it by Transfer-Encoding and keep the
	// connection open for whatever followed.
	t.Run("RefusesContentLengthWithTransferEncodingAndCloses", func(t *testing.T) {
		t.Parallel()
		addr := setup(t)
		for name, requests := range map[string][]string{
			"Alone":                    {smuggling},
			"AfterOthersOnTheSameConn": {plainPost, chunkedPost, smuggling},
			"WithItsFieldsInAnyCase":   {strings.NewReplacer("Content-Length", "content-LENGTH", "Transfer-Encoding", "transfer-encoding").Replace(smuggling)},
			"InHTTP12":                 {strings.Replace(smuggling, "HTTP/1.1", "HTTP/1.2", 1)},
			"AfterAHugeField":          {"GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("b", 64<<10) + "\r\n\r\n", smuggling},
			"AfterAZeroPaddedLength":   {strings.Replace(plainPost, "Content-Length: 5", "Content-Length: "+strings.Repeat("0", 8<<10)+"5", 1), smuggling},
			"AfterPostsThatReadByte":   {plainPost, plainPost, plainPost, smuggling},
			// RFC 9112: Transfer-Encoding in HTTP/1.0 is faulty framing,
			// even with no Content-Length.
			"TransferEncodingInHTTP10": {"POST /echo HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\nhello"},
		} {
			// A request follows on the connection; it is never answered.
			statuses, bodies, closed := exchange(t, addr, append(requests, getOK)...)
			require.Len(t, statuses, len(requests), "%s: the ones before are served, none after: %q", name, bodies)
			last := len(statuses) - 1
			require.Equal(t, http.StatusBadRequest, statuses[last], "%s: %q", name, bodies)
			require.Contains(t, bodies[last], `"code":"ambiguous_framing"`, name)
			require.True(t, closed, "%s: the connection is closed", name)
		}
	})

	// net/http answers OPTIONS * itself, before any handler: the request
	// after it on the connection is refused in its place.
	t.Run("RefusesWhatFollowsAnAmbiguousRequestNoHandlerSaw", func(t *testing.T) {
		t.Parallel()
		statuses, _, closed := exchange(t, setup(t), optionsStar, getOK)
		require.Equal(t, []int{200, 400}, statuses)
		require.True(t, closed)
	})

	t.Run("AnswersAProblemDocument", func(t *testing.T) {
		t.Parallel()
		conn, err := net.Dial("tcp", setup(t))
		require.NoError(t, err)
		defer conn.Close()
		_, err = io.WriteString(conn, smuggling)
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, problem.ContentType, resp.Header.Get("Content-Type"))
		require.True(t, resp.Close, "Connection: close")
	})
}
