package payment

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
)

// TestSizedBodies sends bodies whose length the request does not give, in
// both of the ways net/http lets a client say so, and checks each reaches
// the server with its length rather than chunked.
func TestSizedBodies(t *testing.T) {
	t.Parallel()

	type seen struct {
		contentLength    int64
		transferEncoding []string
		body             string
	}
	setup := func(t *testing.T) (string, chan seen) {
		t.Helper()
		requests := make(chan seen, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				t.Errorf("read the body: %v", err) // not FailNow: this is the server's goroutine
			}
			requests <- seen{r.ContentLength, r.TransferEncoding, string(body)}
		}))
		t.Cleanup(srv.Close)
		return srv.URL, requests
	}

	for name, unknown := range map[string]int64{"ContentLengthZero": 0, "ContentLengthUnknown": -1} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			url, requests := setup(t)
			// A reader net/http cannot measure, as stripe-go's form body.
			body := io.MultiReader(strings.NewReader("amount=2000&currency=usd"))
			req, err := http.NewRequest(http.MethodPost, url, body)
			require.NoError(t, err)
			req.ContentLength = unknown
			resp, err := (&http.Client{Transport: newTransport(time.Minute)}).Do(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			got := <-requests
			require.Empty(t, got.transferEncoding, "not chunked")
			require.Equal(t, "amount=2000&currency=usd", got.body)
			require.EqualValues(t, len(got.body), got.contentLength)
		})
	}
}

// TestGatewayBoundsEachAttempt: a gateway's transport bounds each attempt
// by the configured Timeout, and by DefaultTimeout when none is set; what
// the bound does is TestAttemptTimeout's.
func TestGatewayBoundsEachAttempt(t *testing.T) {
	t.Parallel()
	for configured, want := range map[time.Duration]time.Duration{50 * time.Millisecond: 50 * time.Millisecond, 0: DefaultTimeout} {
		api, err := NewStripeClient(&Config{APIKey: "sk_test_payment", Timeout: configured})
		require.NoError(t, err)
		backend, ok := api.Charges.B.(*stripe.BackendImplementation)
		require.True(t, ok, "stripe-go's own backend, %T", api.Charges.B)
		transport, ok := backend.HTTPClient.Transport.(attemptTransport)
		require.True(t, ok, "%T", backend.HTTPClient.Transport)
		require.Equal(t, want, transport.timeout, "Timeout %s", configured)
		require.Zero(t, backend.HTTPClient.Timeout, "no Client.Timeout besides")
	}
}

// TestAttemptTimeout: the transport bounds an attempt at Stripe that never
// answers, and one whose answer stops halfway through its body. Neither
// server ever finishes, so without the bound neither call would return.
func TestAttemptTimeout(t *testing.T) {
	t.Parallel()
	stall := func(t *testing.T, answer func(w http.ResponseWriter)) string {
		t.Helper()
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			answer(w)
			<-release
		}))
		t.Cleanup(srv.Close)
		t.Cleanup(func() { close(release) }) // before Close, which waits for the handler
		return srv.URL
	}
	// Long enough that a busy machine delivers HalfABody's headers within
	// it; the calls end on the bound either way, since nothing else ends
	// them.
	client := &http.Client{Transport: newTransport(2 * time.Second)}

	t.Run("NoAnswer", func(t *testing.T) {
		t.Parallel()
		url := stall(t, func(http.ResponseWriter) {})
		_, err := client.Post(url, "application/x-www-form-urlencoded", strings.NewReader("amount=2000"))
		require.True(t, errors.Is(err, context.DeadlineExceeded), "err = %v", err)
	})

	t.Run("HalfABody", func(t *testing.T) {
		t.Parallel()
		url := stall(t, func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", "100")
			_, _ = w.Write([]byte(`{"id": "ch_`))
			w.(http.Flusher).Flush()
		})
		resp, err := client.Post(url, "application/x-www-form-urlencoded", strings.NewReader("amount=2000"))
		require.NoError(t, err)
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		require.True(t, errors.Is(err, context.DeadlineExceeded), "err = %v", err)
	})
}
