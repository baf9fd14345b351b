package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/api"
	"github.com/rocketrides/rocketrides/internal/platform/problem"
	"github.com/rocketrides/rocketrides/internal/platform/serve"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

// TestStalledBody serves the API as the api process does
// (api.ServerConfig), its read timeout cut from 15 seconds to a fraction
// so that the test need not wait, and sends a body that stops arriving.
func TestStalledBody(t *testing.T) {
	t.Parallel()

	// It used to answer 400 malformed_body, which the retry protocol
	// calls final: a client would have given up on a ride it never sent
	// whole.
	t.Run("AnswersARetryable408AndClosesTheConnection", func(t *testing.T) {
		t.Parallel()
		b := apitest.New(t, apitest.Options{})
		cfg := api.ServerConfig("127.0.0.1:0", b.Handler, slog.New(slog.DiscardHandler))
		cfg.ReadTimeout = 500 * time.Millisecond
		srv, err := serve.Listen(cfg)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx) }()
		t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

		conn, err := net.Dial("tcp", srv.Addr())
		require.NoError(t, err)
		defer conn.Close()
		key := apitest.NewKey()
		body := apitest.DefaultParams
		_, err = fmt.Fprintf(conn, "POST /rides HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer %s\r\nIdempotency-Key: %s\r\n"+
			"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n%s",
			b.Token, key, len(body), body[:len(body)/2])
		require.NoError(t, err)
		// The rest of the body never comes.
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		defer resp.Body.Close()
		var p problem.Problem
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))

		require.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
		require.Equal(t, "request_timeout", p.Code)
		require.Equal(t, "Request Timeout", p.Title)
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
		require.True(t, resp.Close, "Connection: close (RFC 9110, section 15.5.9)")
		require.Equal(t, problem.ContentType, resp.Header.Get("Content-Type"))
		require.NotEmpty(t, resp.Header.Get("Request-Id"), "the headers set before the handler ran stay")
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
		_, err = br.ReadByte()
		require.ErrorIs(t, err, io.EOF, "the connection is closed")
		require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1`, key),
			"nothing was done: the key was never used")
	})
}

// TestAnswerHeaders: answers about one user's payments used to carry no
// Cache-Control, and none said not to sniff their type.
func TestAnswerHeaders(t *testing.T) {
	t.Parallel()
	b := apitest.New(t, apitest.Options{})
	auth := []string{"Authorization", "Bearer " + b.Token}
	for _, tc := range []struct {
		method, path string
		headers      []string
	}{
		{http.MethodGet, "/rides", auth},
		{http.MethodHead, "/rides", auth},
		{http.MethodGet, "/rides/1", auth},
		{http.MethodGet, "/rides", nil},
		{http.MethodPost, "/rides", auth},
		{http.MethodGet, "/healthz", nil},
		{http.MethodGet, "/readyz", nil},
		{http.MethodGet, "/openapi.yaml", nil},
		{http.MethodGet, "/errors", nil},
		{http.MethodGet, "/no/such/path", nil},
		{http.MethodDelete, "/rides", auth},
	} {
		resp := b.Do(t, tc.method, tc.path, "", tc.headers...)
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"), "%s %s answered %d", tc.method, tc.path, resp.Status)
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), "%s %s answered %d", tc.method, tc.path, resp.Status)
	}
}
