package payment

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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
			resp, err := (&http.Client{Transport: newTransport()}).Do(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			got := <-requests
			require.Empty(t, got.transferEncoding, "not chunked")
			require.Equal(t, "amount=2000&currency=usd", got.body)
			require.EqualValues(t, len(got.body), got.contentLength)
		})
	}
}
