package rides_test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

// TestClientHangUp reproduces, at the socket level, a mobile client that
// loses its connection right after sending POST /rides: the request is
// written whole and the socket closed at once, so the server cancels the
// request's context somewhere between reading the body and answering,
// often while the key's claim is in flight. Whatever the moment, the key
// must not be left locked with nobody to release it: the client's retry
// with the same key runs at once instead of being answered 409
// request_in_progress until the lock goes stale (90 s).
func TestClientHangUp(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	b := apitest.New(t, apitest.Options{LogOutput: logs})
	u, err := url.Parse(b.URL)
	require.NoError(t, err)

	hangUp := func(key string, after time.Duration) {
		conn, err := net.Dial("tcp", u.Host)
		require.NoError(t, err)
		body := apitest.DefaultParams
		_, err = fmt.Fprintf(conn, "POST /rides HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
			"Idempotency-Key: %s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n%s",
			u.Host, b.Token, key, len(body), body)
		require.NoError(t, err)
		time.Sleep(after)
		require.NoError(t, conn.Close())
	}

	const hangUps = 60
	keys := make([]string, hangUps)
	for i := range keys {
		keys[i] = apitest.NewKey()
		// Hang up at moments spread over the few milliseconds the
		// request takes to reach and pass its claim.
		hangUp(keys[i], time.Duration(i%20)*250*time.Microsecond)
		// Let the server get as far as it does before the next one.
		time.Sleep(5 * time.Millisecond)
	}

	// Each retry may briefly meet the abandoned request still running
	// (409 with Retry-After: 1); it must get through before the lock
	// timeout (90 s) would free a key nobody released.
	deadline := time.Now().Add(60 * time.Second)
	var wg sync.WaitGroup
	for _, key := range keys {
		wg.Go(func() {
			for {
				resp := b.PostRide(t, key, apitest.DefaultParams)
				if resp.Status == http.StatusCreated {
					return
				}
				if resp.Status != http.StatusConflict || time.Now().After(deadline) {
					t.Errorf("retry of key %s after a hang-up: %d %s", key, resp.Status, resp.Body)
					return
				}
				wait, err := strconv.Atoi(resp.Header.Get("Retry-After"))
				if err != nil {
					t.Errorf("409 without a Retry-After: %v", err)
					return
				}
				time.Sleep(time.Duration(wait) * time.Second)
			}
		})
	}
	wg.Wait()
	require.Equal(t, hangUps, b.Count(t, `SELECT count(*) FROM rides WHERE stripe_charge_id IS NOT NULL`), "one charged ride per key")
	require.Equal(t, hangUps, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE recovery_point = 'finished'`))

	// Every line about a cut-short request names its key.
	var abandoned int
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "abandoned by its client") {
			abandoned++
			require.Contains(t, line, "idempotency_key_id=", "log line: %s", line)
		}
	}
	require.Positive(t, abandoned)
}

// lockedBuffer is a log destination the server's goroutines share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
