package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"
)

// try is what the test server saw of one try.
type seen struct {
	key, body string
}

// script is a test server that answers each try with the next of its
// answers, and records every try.
type script struct {
	mu      sync.Mutex
	answers []func(w http.ResponseWriter)
	tries   []seen
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.tries)
	s.tries = append(s.tries, seen{key: r.Header.Get("Idempotency-Key"), body: string(body)})
	s.mu.Unlock()
	if n >= len(s.answers) {
		n = len(s.answers) - 1
	}
	s.answers[n](w)
}

func problemAnswer(status int, code string, header ...string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"type":"x","title":"t","status":`+strconv.Itoa(status)+`,"code":"`+code+`","ride_id":42}`)
	}
}

func rideAnswer(replayed bool) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		if replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":42,"created_at":"2024-05-01T12:00:00.123456Z","status":"succeeded","origin_lat":1,"origin_lon":2,"target_lat":3,"target_lon":4,"amount":2000,"currency":"usd","stripe_charge_id":"ch_1"}`)
	}
}

// testClient is a client of srv whose waits are recorded, not slept,
// and whose jitter always draws the ceiling.
func testClient(t *testing.T, srv *httptest.Server, cfg Config) (*Client, *[]time.Duration, *[]Attempt) {
	t.Helper()
	var waits []time.Duration
	var attempts []Attempt
	cfg.URL, cfg.Token = srv.URL, "rr_test_token"
	cfg.Jitter = func(ceiling time.Duration) time.Duration { return ceiling }
	cfg.Sleep = func(ctx context.Context, d time.Duration) error { waits = append(waits, d); return ctx.Err() }
	cfg.OnAttempt = func(a Attempt) { attempts = append(attempts, a) }
	c, err := New(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, &waits, &attempts
}

var params = RideParams{OriginLat: 37.7749, OriginLon: -122.4194, TargetLat: 37.8044, TargetLon: -122.2712}

func TestCreateRide(t *testing.T) {
	t.Parallel()

	t.Run("RetriesWithTheSameKeyAndBodyHonouringRetryAfter", func(t *testing.T) {
		t.Parallel()
		s := &script{answers: []func(http.ResponseWriter){
			problemAnswer(503, "payment_unavailable", "Retry-After", "2"),
			problemAnswer(409, "request_in_progress", "Retry-After", "1"),
			func(w http.ResponseWriter) { panic(http.ErrAbortHandler) }, // no answer
			rideAnswer(true),
		}}
		srv := httptest.NewServer(s)
		defer srv.Close()
		c, waits, attempts := testClient(t, srv, Config{})

		ride, err := c.CreateRide(context.Background(), params)
		if err != nil {
			t.Fatal(err)
		}
		if ride.ID != 42 || ride.Status != Succeeded || !ride.Replayed || ride.StripeChargeID != "ch_1" {
			t.Fatalf("ride %+v", ride)
		}
		if len(s.tries) != 4 {
			t.Fatalf("%d tries, want 4", len(s.tries))
		}
		for _, tr := range s.tries {
			if tr != s.tries[0] {
				t.Fatalf("try %+v differs from the first, %+v", tr, s.tries[0])
			}
		}
		if s.tries[0].key == "" {
			t.Fatal("no key sent")
		}
		// Retry-After wins over a shorter backoff ceiling (0.5 s, 1 s);
		// the third wait is the backoff's 2 s ceiling.
		want := []time.Duration{2 * time.Second, time.Second, 2 * time.Second}
		if len(*waits) != len(want) {
			t.Fatalf("waits %v, want %v", *waits, want)
		}
		for i := range want {
			if (*waits)[i] != want[i] {
				t.Fatalf("waits %v, want %v", *waits, want)
			}
		}
		if n := len(*attempts); n != 4 || (*attempts)[2].Err == nil || (*attempts)[3].Retry {
			t.Fatalf("attempts %v", *attempts)
		}
	})

	t.Run("StopsOnAFinalAnswer", func(t *testing.T) {
		t.Parallel()
		for _, code := range []struct {
			status int
			code   string
		}{{402, "card_declined"}, {422, "idempotency_key_reused"}, {502, "payment_rejected"}, {400, "malformed_body"}} {
			s := &script{answers: []func(http.ResponseWriter){problemAnswer(code.status, code.code)}}
			srv := httptest.NewServer(s)
			c, waits, _ := testClient(t, srv, Config{})
			_, err := c.CreateRide(context.Background(), RideParams{IdempotencyKey: "key-chosen-by-the-caller-1"})
			srv.Close()
			var e *Error
			if !errors.As(err, &e) || !e.Final || e.Code != code.code || e.RideID != 42 || e.IdempotencyKey != "key-chosen-by-the-caller-1" {
				t.Fatalf("%d: error %#v", code.status, err)
			}
			if len(s.tries) != 1 || len(*waits) != 0 || s.tries[0].key != "key-chosen-by-the-caller-1" {
				t.Fatalf("%d: %d tries, waits %v", code.status, len(s.tries), *waits)
			}
		}
	})

	t.Run("PrefersTheServersHint", func(t *testing.T) {
		t.Parallel()
		s := &script{answers: []func(http.ResponseWriter){problemAnswer(500, "internal_error", ShouldRetryHeader, "false")}}
		srv := httptest.NewServer(s)
		defer srv.Close()
		c, _, _ := testClient(t, srv, Config{})
		_, err := c.CreateRide(context.Background(), params)
		var e *Error
		if !errors.As(err, &e) || !e.Final || len(s.tries) != 1 {
			t.Fatalf("%d tries, error %v", len(s.tries), err)
		}

		s = &script{answers: []func(http.ResponseWriter){problemAnswer(400, "future_code", ShouldRetryHeader, "true"), rideAnswer(false)}}
		srv2 := httptest.NewServer(s)
		defer srv2.Close()
		c, _, _ = testClient(t, srv2, Config{})
		if _, err := c.CreateRide(context.Background(), params); err != nil || len(s.tries) != 2 {
			t.Fatalf("%d tries, error %v", len(s.tries), err)
		}
	})

	t.Run("GivesUpWhenTheTriesRunOut", func(t *testing.T) {
		t.Parallel()
		s := &script{answers: []func(http.ResponseWriter){problemAnswer(503, "payment_unavailable", "Retry-After", "1")}}
		srv := httptest.NewServer(s)
		defer srv.Close()
		c, waits, _ := testClient(t, srv, Config{MaxAttempts: 3})
		_, err := c.CreateRide(context.Background(), params)
		var e *Error
		if !errors.As(err, &e) || e.Final || e.RetryAfter != time.Second || len(s.tries) != 3 || len(*waits) != 2 {
			t.Fatalf("%d tries, waits %v, error %#v", len(s.tries), *waits, err)
		}
	})

	// Without an answer the request may have run: the error carries the
	// key the client made, for a later retry of the same ride.
	t.Run("GivesUpWithoutAnAnswerAndKeepsTheKey", func(t *testing.T) {
		t.Parallel()
		cut := func(w http.ResponseWriter) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		}
		s := &script{answers: []func(http.ResponseWriter){cut}}
		srv := httptest.NewServer(s)
		defer srv.Close()
		c, _, _ := testClient(t, srv, Config{MaxAttempts: 2})
		_, err := c.CreateRide(context.Background(), params)
		var e *NoAnswerError
		if !errors.As(err, &e) || len(s.tries) != 2 || e.IdempotencyKey == "" || e.IdempotencyKey != s.tries[0].key || e.IdempotencyKey != s.tries[1].key {
			t.Fatalf("%d tries %v, error %#v", len(s.tries), s.tries, err)
		}
	})

	t.Run("GivesUpRatherThanRetryEarly", func(t *testing.T) {
		t.Parallel()
		s := &script{answers: []func(http.ResponseWriter){problemAnswer(429, "rate_limited", "Retry-After", "3600")}}
		srv := httptest.NewServer(s)
		defer srv.Close()
		c, waits, _ := testClient(t, srv, Config{})
		_, err := c.CreateRide(context.Background(), params)
		var e *Error
		if !errors.As(err, &e) || e.Final || e.RetryAfter != time.Hour || len(s.tries) != 1 || len(*waits) != 0 {
			t.Fatalf("%d tries, waits %v, error %#v", len(s.tries), *waits, err)
		}
	})

	t.Run("GivesUpRatherThanOutlastTheDeadline", func(t *testing.T) {
		t.Parallel()
		s := &script{answers: []func(http.ResponseWriter){problemAnswer(409, "request_in_progress", "Retry-After", "20")}}
		srv := httptest.NewServer(s)
		defer srv.Close()
		c, waits, _ := testClient(t, srv, Config{})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.CreateRide(ctx, params)
		if !Is(err, "request_in_progress") || len(s.tries) != 1 || len(*waits) != 0 {
			t.Fatalf("%d tries, waits %v, error %v", len(s.tries), *waits, err)
		}
	})

	t.Run("SendsExtraFieldsOnEveryTry", func(t *testing.T) {
		t.Parallel()
		s := &script{answers: []func(http.ResponseWriter){problemAnswer(500, "internal_error"), rideAnswer(false)}}
		srv := httptest.NewServer(s)
		defer srv.Close()
		c, _, _ := testClient(t, srv, Config{})
		p := params
		p.Extra = url.Values{"raise_error": {"true"}}
		if _, err := c.CreateRide(context.Background(), p); err != nil {
			t.Fatal(err)
		}
		v, err := url.ParseQuery(s.tries[1].body)
		if err != nil || v.Get("raise_error") != "true" || v.Get("origin_lat") != "37.7749" || s.tries[0] != s.tries[1] {
			t.Fatalf("tries %+v", s.tries)
		}
	})
}

func TestGetAndList(t *testing.T) {
	t.Parallel()
	var paths []string
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.RequestURI())
		n++
		if n == 1 {
			problemAnswer(503, "unavailable", "Retry-After", "1")(w)
			return
		}
		if r.URL.Path == "/rides" {
			_, _ = io.WriteString(w, `{"object":"list","url":"/rides","has_more":true,"data":[{"id":7,"status":"pending","stripe_charge_id":null}]}`)
			return
		}
		rideAnswer(false)(w)
	}))
	defer srv.Close()
	c, _, _ := testClient(t, srv, Config{})
	list, err := c.ListRides(context.Background(), ListParams{Limit: 1, Status: Pending})
	if err != nil || !list.HasMore || len(list.Data) != 1 || list.Data[0].ID != 7 || list.Data[0].StripeChargeID != "" || list.Data[0].Status.Final() {
		t.Fatalf("list %+v, error %v", list, err)
	}
	ride, err := c.GetRide(context.Background(), 42)
	if err != nil || ride.ID != 42 || !ride.Status.Final() {
		t.Fatalf("ride %+v, error %v", ride, err)
	}
	want := []string{"/rides?limit=1&status=pending", "/rides?limit=1&status=pending", "/rides/42"}
	if len(paths) != len(want) || paths[0] != want[0] || paths[1] != want[1] || paths[2] != want[2] {
		t.Fatalf("paths %v, want %v", paths, want)
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, cfg := range []*Config{
		nil,
		{Token: "t"},
		{URL: "ftp://x", Token: "t"},
		{URL: "http://127.0.0.1:1"},
		{URL: "http://127.0.0.1:1", Token: "t", MaxAttempts: -1},
		{URL: "http://127.0.0.1:1", Token: "t", MaxDelay: -1},
	} {
		if _, err := New(cfg); err == nil {
			t.Fatalf("New(%+v) accepted", cfg)
		}
	}
	if k := NewKey(); len(k) != 36 || k == NewKey() || k[14] != '4' {
		t.Fatalf("NewKey %q", k)
	}
}

func TestWait(t *testing.T) {
	t.Parallel()
	newClient := func(t *testing.T, cfg Config) *Client {
		t.Helper()
		cfg.URL, cfg.Token = "http://127.0.0.1:5000", "tok"
		c, err := New(&cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	noJitter := func(ceiling time.Duration) time.Duration { return ceiling }
	ctx := context.Background()

	t.Run("DoublesCeilingUpToMaxDelay", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, Config{BaseDelay: time.Second, MaxDelay: 5 * time.Second, Jitter: noJitter})
		want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
		for n := 1; n <= 5; n++ {
			if d, ok := c.wait(ctx, n, 0); !ok || d != want[n-1] {
				t.Fatalf("wait before retry %d: %s %t, want %s", n, d, ok, want[n-1])
			}
		}
		if d, _ := c.wait(ctx, 200, 0); d != 5*time.Second {
			t.Fatalf("no overflow: %s", d)
		}
	})

	t.Run("FullJitterStaysWithinCeiling", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, Config{BaseDelay: 100 * time.Millisecond})
		for range 1000 {
			if d, ok := c.wait(ctx, 3, 0); !ok || d < 0 || d > 400*time.Millisecond {
				t.Fatalf("wait %s %t, want within [0, 400ms]", d, ok)
			}
		}
	})

	t.Run("RetryAfterIsFloorAndMaxDelayItsLimit", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, Config{Jitter: func(time.Duration) time.Duration { return 0 }})
		if d, ok := c.wait(ctx, 1, time.Second); !ok || d != time.Second {
			t.Fatalf("wait %s %t, want 1s", d, ok)
		}
		// Longer than MaxDelay: no retry at all, rather than one too early.
		if _, ok := c.wait(ctx, 1, time.Hour); ok {
			t.Fatal("retries after a Retry-After of an hour")
		}
	})
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"2": 2 * time.Second,
		now.Add(30 * time.Second).Format(http.TimeFormat): 30 * time.Second,
		now.Add(-time.Minute).Format(http.TimeFormat):     0,
		"":     0,
		"soon": 0,
		"-5":   0,
	} {
		if got := parseRetryAfter(v, now); got != want {
			t.Fatalf("parseRetryAfter(%q) = %s, want %s", v, got, want)
		}
	}
}
