package clientcheck_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/client"
	"github.com/rocketrides/rocketrides/internal/proof/clientcheck"
)

// harness serves a fresh harness for the test.
func harness(t *testing.T) (*clientcheck.Harness, string) {
	t.Helper()
	h, err := clientcheck.New(nil)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return h, srv.URL
}

func caseURL(t *testing.T, base, name string) string {
	t.Helper()
	u, err := clientcheck.URL(base, name)
	require.NoError(t, err)
	return u
}

// TestClientPackage runs the project's Go client, with its defaults and
// in this process, against every case that does not kill it (the death
// cases kill a command: TestProjectClients): it must pass them all.
func TestClientPackage(t *testing.T) {
	t.Parallel()
	h, base := harness(t)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var living []string
	for _, c := range clientcheck.Cases() {
		if !c.Dies() {
			living = append(living, c.Name)
		}
	}
	done := make(chan error, len(living))
	for _, name := range living {
		url := caseURL(t, base, name) // here: it may fail the test, which a goroutine must not
		go func() {
			c, err := client.New(&client.Config{URL: url, Token: "rr_clientcheck_token"})
			if err != nil {
				done <- err
				return
			}
			_, err = c.CreateRide(ctx, client.RideParams{OriginLat: 37.7749, OriginLon: -122.4194, TargetLat: 37.8044, TargetLon: -122.2712})
			var prob *client.Error
			switch {
			case err == nil, errors.As(err, &prob):
				done <- nil
			default:
				done <- err // only connection-cut's first try has no answer, and it is retried
			}
		}()
	}
	for range living {
		require.NoError(t, <-done)
	}
	report := h.Report()
	t.Logf("the client package against the harness:\n%s", report)
	for _, name := range living {
		res := report.Result(name)
		require.True(t, res.Passed(), "%s: %v\n%s", name, res.Failed(), report)
	}
}

// wrongClient is a client that breaks one rule of the protocol on
// purpose, and keeps the others: the harness must name the rule.
type wrongClient struct {
	newKeyEachTry    bool // a new key on every try
	ignoreRetryAfter bool // retry at once, whatever Retry-After says
	retryFinal       bool // retry a 402 as if it might change
}

// createRide tries up to 4 times, and reports nothing: the harness
// judges what it did.
func (w wrongClient) createRide(ctx context.Context, url string) {
	key := client.NewKey()
	for try := 1; try <= 4; try++ {
		if w.newKeyEachTry {
			key = client.NewKey()
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/rides",
			strings.NewReader("origin_lat=37.7749&origin_lon=-122.4194&target_lat=37.8044&target_lon=-122.2712"))
		if err != nil {
			return
		}
		req.Header.Set("Authorization", "Bearer rr_clientcheck_token")
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		wait := 100 * time.Millisecond << (try - 1)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			retry := resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusTooManyRequests ||
				resp.StatusCode >= 500 || w.retryFinal && resp.StatusCode == http.StatusPaymentRequired
			if !retry {
				return
			}
			if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && !w.ignoreRetryAfter {
				wait = max(wait, time.Duration(ra)*time.Second)
			}
			if w.ignoreRetryAfter {
				wait = 0
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// TestWrongClients shows the harness failing a client for each rule it
// breaks on purpose, and only for that rule.
func TestWrongClients(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name   string
		client wrongClient
		cases  []string
		broken string
	}{
		{"ChangesTheKey", wrongClient{newKeyEachTry: true}, []string{"in-flight", "rate-limited", "after-charge"}, clientcheck.RuleSameRequest},
		{"IgnoresRetryAfter", wrongClient{ignoreRetryAfter: true}, []string{"in-flight", "rate-limited", "unavailable"}, clientcheck.RuleRetryAfter},
		{"Retries402", wrongClient{retryFinal: true}, []string{"declined"}, clientcheck.RuleStopped},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, base := harness(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for _, name := range tt.cases {
				tt.client.createRide(ctx, caseURL(t, base, name))
			}
			report := h.Report()
			t.Logf("%s:\n%s", tt.name, report)
			for _, name := range tt.cases {
				res := report.Result(name)
				require.True(t, res.Run, "%s", name)
				require.False(t, res.Passed(), "%s passed a client that breaks %q", name, tt.broken)
				require.Equal(t, []string{tt.broken}, res.Failed(), "%s: the rules it broke", name)
			}
		})
	}
}

// TestRulesCaughtWithoutTiming checks the rules that need no clock on
// tries sent by hand: a case not run is not passed, and a client that
// keeps trying past the budget or stops too soon is caught.
func TestRulesCaughtWithoutTiming(t *testing.T) {
	t.Parallel()

	post := func(t *testing.T, url, key string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, url+"/rides",
			strings.NewReader("origin_lat=1&origin_lon=2&target_lat=3&target_lon=4"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}

	t.Run("NotRunIsNotPassed", func(t *testing.T) {
		t.Parallel()
		h, _ := harness(t)
		report := h.Report()
		require.False(t, report.Passed())
		require.False(t, report.Result("declined").Run)
		require.Contains(t, report.String(), "not run")
	})

	t.Run("StoppingOnARetryableAnswer", func(t *testing.T) {
		t.Parallel()
		h, base := harness(t)
		resp := post(t, caseURL(t, base, "after-charge"), client.NewKey())
		require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
		require.Equal(t, "true", resp.Header.Get(client.ShouldRetryHeader))
		require.Equal(t, []string{clientcheck.RuleRetried}, h.Report().Result("after-charge").Failed())
	})

	t.Run("PastTheBudget", func(t *testing.T) {
		t.Parallel()
		h, err := clientcheck.New(&clientcheck.Config{Budget: 2})
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		defer srv.Close()
		key := client.NewKey()
		for range 3 {
			post(t, caseURL(t, srv.URL, "unavailable"), key)
		}
		res := h.Report().Result("unavailable")
		require.Equal(t, 3, res.Tries)
		require.Contains(t, res.Failed(), clientcheck.RuleBudget)
	})

	t.Run("ABadKey", func(t *testing.T) {
		t.Parallel()
		h, base := harness(t)
		post(t, caseURL(t, base, "declined"), "short")
		require.Equal(t, []string{clientcheck.RuleSameRequest}, h.Report().Result("declined").Failed())
	})

	// The runner kills a client in its backoff wait half a second after
	// the answer; a retry that beats the kill (the runner starved on a
	// busy machine) is held unanswered, so that the client dies before
	// it can finish the ride and the restart still has it to resume.
	t.Run("ARetryThatBeatsTheKillDiesUnanswered", func(t *testing.T) {
		t.Parallel()
		h, base := harness(t)
		key := client.NewKey()
		resp := post(t, caseURL(t, base, "killed-in-backoff"), key)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)

		req, err := http.NewRequest(http.MethodPost, caseURL(t, base, "killed-in-backoff")+"/rides",
			strings.NewReader("origin_lat=1&origin_lon=2&target_lat=3&target_lon=4"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		_, err = (&http.Client{Timeout: 200 * time.Millisecond}).Do(req)
		require.Error(t, err, "the retry was answered before the kill")
		res := h.Report().Result("killed-in-backoff")
		require.Equal(t, 2, res.Tries)
		require.Contains(t, res.Failed(), clientcheck.RuleResumed, "no restart followed")
	})

	t.Run("UnknownCase", func(t *testing.T) {
		t.Parallel()
		_, err := clientcheck.URL("http://127.0.0.1:1", "nosuch")
		require.ErrorIs(t, err, clientcheck.ErrUnknownCase)
	})
}
