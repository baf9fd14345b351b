package simulator

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/client"
	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

// waits records the policy's waits instead of sleeping through them, and
// runs onSleep (if set) at each one, between two attempts.
type waits struct {
	mu      sync.Mutex
	got     []time.Duration
	onSleep func()
}

func (w *waits) sleep(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	w.got = append(w.got, d)
	w.mu.Unlock()
	if w.onSleep != nil {
		w.onSleep()
	}
	return ctx.Err()
}

func (w *waits) all() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Duration(nil), w.got...)
}

// noJitter makes every backoff wait its ceiling.
func noJitter(ceiling time.Duration) time.Duration { return ceiling }

// defaultRide is apitest.DefaultParams as a Ride: the request Claim locks.
func defaultRide(key string) Ride {
	return Ride{Key: key, OriginLat: 37.7749, OriginLon: -122.4194, TargetLat: 37.8044, TargetLon: -122.2712}
}

func TestSendAgainstAPI(t *testing.T) {
	t.Parallel()
	// One stack for every case: each ride has its own key.
	stack := apitest.New(t, apitest.Options{SimulatedErrors: true})

	type testBundle struct {
		sim   *Simulator
		waits *waits
		out   *bytes.Buffer
	}
	setup := func(t *testing.T, errorRate float64) *testBundle {
		t.Helper()
		b := &testBundle{waits: &waits{}, out: &bytes.Buffer{}}
		sim, err := New(&Config{
			URL: stack.URL, Token: stack.Token, ErrorRate: errorRate, Out: b.out,
			Retry: Policy{Jitter: noJitter, Sleep: b.waits.sleep},
		})
		require.NoError(t, err)
		b.sim = sim
		return b
	}

	t.Run("CreatesRide", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)

		o := b.sim.Send(context.Background())
		require.Equal(t, Succeeded, o.Result, "%s", o)
		require.Equal(t, http.StatusCreated, o.Status)
		require.Equal(t, 1, o.Attempt)
		require.False(t, o.RaiseError)
		require.Positive(t, o.RideID)
		require.True(t, strings.HasPrefix(o.ChargeID, "ch_"), "charge id %q", o.ChargeID)
		require.Equal(t, idem.Finished, stack.KeyRow(t, o.Key).RecoveryPoint)
		require.Contains(t, b.out.String(), "key="+o.Key+" attempt=1 status=201")
		require.Empty(t, b.waits.all())
	})

	t.Run("LeavesSimulatedFailureForCompleter", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1)

		o := b.sim.Send(context.Background())
		require.Equal(t, SimulatedFailure, o.Result, "%s", o)
		require.True(t, o.RaiseError)
		require.Equal(t, http.StatusInternalServerError, o.Status)
		require.Equal(t, "internal_error", o.Code)
		require.Equal(t, 1, o.Attempt, "the simulated failure is not retried")
		require.Empty(t, b.waits.all())

		row := stack.KeyRow(t, o.Key)
		require.Equal(t, rides.RideCreated, row.RecoveryPoint)
		require.Nil(t, row.LockedAt, "unlocked, for the completer")
		require.Contains(t, b.out.String(), "result=simulated_failure next=completer")
	})

	t.Run("RetriesKeyInFlightUntilItIsReleased", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		key := apitest.NewKey()
		// Another request holds the key; it goes away after the first
		// attempt was refused.
		held := stack.Claim(t, key)
		b.waits.onSleep = func() { require.NoError(t, stack.Keys.Unlock(context.Background(), held)) }

		o := b.sim.SendRide(context.Background(), defaultRide(key))
		require.Equal(t, Succeeded, o.Result, "%s", o)
		require.Equal(t, 2, o.Attempt)
		require.Equal(t, http.StatusCreated, o.Status)
		// The 409 said Retry-After: 1, above the 500ms backoff ceiling.
		require.Equal(t, []time.Duration{time.Second}, b.waits.all())
		require.Contains(t, b.out.String(), "key="+key+" attempt=1 status=409 code=request_in_progress")
		require.Equal(t, idem.Finished, stack.KeyRow(t, key).RecoveryPoint)
		require.Len(t, stack.ChargesFor(held.ID), 1)
	})

	// A run killed after its ride's first try had charged the rider left
	// the ride in the journal: the next run resumes it, with its key and
	// bytes, before any new ride, and the rider is charged once for it.
	t.Run("RunResumesTheJournalsRidesFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		j, err := client.NewFileJournal(filepath.Join(t.TempDir(), "rides-journal"))
		require.NoError(t, err)
		b.sim.cfg.Journal, b.sim.cfg.Rides = j, 1
		killed := client.PendingRide{IdempotencyKey: apitest.NewKey(), Body: "origin_lat=37.7749&origin_lon=-122.4194&target_lat=37.8044&target_lon=-122.2712", Recorded: time.Now()}
		require.NoError(t, j.Add(killed))
		first := stack.Do(t, http.MethodPost, "/rides", killed.Body, "Authorization", "Bearer "+stack.Token,
			"Idempotency-Key", killed.IdempotencyKey, "Content-Type", "application/x-www-form-urlencoded")
		require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)

		tally := b.sim.Run(context.Background())
		require.Equal(t, Tally{Resumed: 1, Sent: 1, Succeeded: 2}, tally)
		lines := strings.Split(strings.TrimSpace(b.out.String()), "\n")
		require.Len(t, lines, 2, "%s", b.out)
		require.Contains(t, lines[0], "key="+killed.IdempotencyKey+" attempt=1 resumed=true status=201")
		require.Contains(t, lines[0], "replayed=true")
		require.NotContains(t, lines[1], killed.IdempotencyKey)
		row := stack.KeyRow(t, killed.IdempotencyKey)
		require.Len(t, stack.ChargesFor(row.ID), 1)
		pending, err := j.Pending()
		require.NoError(t, err)
		require.Empty(t, pending, "both rides had a final answer")
	})

	t.Run("RunSendsRides", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		keys := []string{apitest.NewKey(), apitest.NewKey(), apitest.NewKey()}
		var next atomic.Int32
		b.sim.cfg.NewKey = func() string { return keys[next.Add(1)-1] }
		b.sim.cfg.Rides = 3

		tally := b.sim.Run(context.Background())
		require.Equal(t, Tally{Sent: 3, Succeeded: 3}, tally)
		require.Equal(t, 3, strings.Count(b.out.String(), "result=succeeded"))
		for _, key := range keys {
			require.Equal(t, idem.Finished, stack.KeyRow(t, key).RecoveryPoint)
		}
	})
}

// recorder is an API stand-in that answers from a script and records
// what each attempt sent.
type recorder struct {
	mu      sync.Mutex
	keys    []string
	bodies  []string
	answers []func(w http.ResponseWriter)
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	n := len(r.keys)
	r.keys = append(r.keys, req.Header.Get("Idempotency-Key"))
	r.bodies = append(r.bodies, string(body))
	answer := r.answers[min(n, len(r.answers)-1)]
	r.mu.Unlock()
	answer(w)
}

func (r *recorder) sent() (keys, bodies []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...), append([]string(nil), r.bodies...)
}

func answer(status int, body string, headers ...string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// hangUp drops the connection without an answer: a network error.
func hangUp(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	_ = conn.Close()
}

var created = answer(http.StatusCreated, `{"id": 7, "stripe_charge_id": "ch_7"}`)

func TestSendRetries(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		api   *recorder
		sim   *Simulator
		waits *waits
	}
	setup := func(t *testing.T, policy Policy, answers ...func(http.ResponseWriter)) *testBundle {
		t.Helper()
		b := &testBundle{api: &recorder{answers: answers}, waits: &waits{}}
		srv := httptest.NewServer(b.api)
		t.Cleanup(srv.Close)
		policy.Sleep = b.waits.sleep
		if policy.Jitter == nil {
			policy.Jitter = noJitter
		}
		sim, err := New(&Config{URL: srv.URL, Token: "tok", Retry: policy, Out: t.Output()})
		require.NoError(t, err)
		b.sim = sim
		return b
	}
	requireIdenticalRequests := func(t *testing.T, b *testBundle, key string, n int) {
		t.Helper()
		keys, bodies := b.api.sent()
		require.Len(t, keys, n)
		for i := range keys {
			require.Equal(t, key, keys[i], "attempt %d", i+1)
			require.Equal(t, bodies[0], bodies[i], "attempt %d", i+1)
		}
	}

	t.Run("RetriesSameRequestHonouringRetryAfter", func(t *testing.T) {
		t.Parallel()
		unavailable := answer(http.StatusServiceUnavailable, `{"code": "payment_unavailable"}`, "Retry-After", "2")
		b := setup(t, Policy{}, unavailable, unavailable, created)

		ride := defaultRide(apitest.NewKey())
		ride.RaiseError = true
		o := b.sim.SendRide(context.Background(), ride)
		require.Equal(t, Succeeded, o.Result, "%s", o)
		require.Equal(t, 3, o.Attempt)
		require.Equal(t, int64(7), o.RideID)
		require.Equal(t, "ch_7", o.ChargeID)
		// Retry-After (2s) is above the backoff ceilings (500ms, 1s).
		require.Equal(t, []time.Duration{2 * time.Second, 2 * time.Second}, b.waits.all())
		requireIdenticalRequests(t, b, ride.Key, 3)
		_, bodies := b.api.sent()
		require.Contains(t, bodies[2], "raise_error=true", "retries send the identical request")
	})

	t.Run("RetriesNetworkError", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Policy{}, hangUp, created)

		ride := defaultRide(apitest.NewKey())
		o := b.sim.SendRide(context.Background(), ride)
		require.Equal(t, Succeeded, o.Result, "%s", o)
		require.Equal(t, 2, o.Attempt)
		require.Equal(t, []time.Duration{DefaultBaseDelay}, b.waits.all())
		requireIdenticalRequests(t, b, ride.Key, 2)
	})

	t.Run("RetriesConflictAndTooManyRequests", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Policy{},
			answer(http.StatusConflict, `{"code": "request_in_progress"}`),
			answer(http.StatusTooManyRequests, `{"code": "rate_limited"}`),
			answer(http.StatusInternalServerError, `{"code": "internal_error"}`),
			created)

		ride := defaultRide(apitest.NewKey())
		o := b.sim.SendRide(context.Background(), ride)
		require.Equal(t, Succeeded, o.Result, "%s", o)
		require.Equal(t, 4, o.Attempt, "a 500 without raise_error is a real failure, worth a retry")
		require.Equal(t, []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}, b.waits.all())
		requireIdenticalRequests(t, b, ride.Key, 4)
	})

	t.Run("GivesUpAfterMaxAttempts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Policy{MaxAttempts: 4, BaseDelay: time.Second, MaxDelay: 3 * time.Second},
			answer(http.StatusBadGateway, `<html>bad gateway</html>`, "Retry-After", "2"))

		ride := defaultRide(apitest.NewKey())
		o := b.sim.SendRide(context.Background(), ride)
		require.Equal(t, GaveUp, o.Result, "%s", o)
		require.Equal(t, 4, o.Attempt)
		require.Equal(t, http.StatusBadGateway, o.Status)
		// Retry-After is a floor, MaxDelay the ceiling of the backoff.
		require.Equal(t, []time.Duration{2 * time.Second, 2 * time.Second, 3 * time.Second}, b.waits.all())
		require.Contains(t, o.String(), "result=gave_up next=completer")
		requireIdenticalRequests(t, b, ride.Key, 4)
	})

	t.Run("GivesUpRatherThanRetryBeforeRetryAfter", func(t *testing.T) {
		t.Parallel()
		// A Retry-After past MaxDelay: the contract forbids an earlier
		// retry, and the simulator does not wait that long.
		b := setup(t, Policy{MaxAttempts: 4, BaseDelay: time.Second, MaxDelay: 3 * time.Second},
			answer(http.StatusBadGateway, `<html>bad gateway</html>`, "Retry-After", "60"))

		ride := defaultRide(apitest.NewKey())
		o := b.sim.SendRide(context.Background(), ride)
		require.Equal(t, GaveUp, o.Result, "%s", o)
		require.Equal(t, 1, o.Attempt)
		require.Equal(t, http.StatusBadGateway, o.Status)
		require.Empty(t, b.waits.all())
		require.Contains(t, o.String(), "result=gave_up next=completer")
	})

	t.Run("StopsRetryingWhenContextEnds", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Policy{}, answer(http.StatusServiceUnavailable, `{"code": "database_contention"}`))
		ctx, cancel := context.WithCancel(context.Background())
		b.waits.onSleep = cancel

		o := b.sim.SendRide(ctx, defaultRide(apitest.NewKey()))
		require.Equal(t, GaveUp, o.Result, "%s", o)
		require.Equal(t, 1, o.Attempt)
	})

	for _, tc := range []struct {
		name     string
		raise    bool
		answer   func(http.ResponseWriter)
		result   Result
		wantCode string
	}{
		// The API marks the failure a request asked for final.
		{"SimulatedFailure", true, answer(http.StatusInternalServerError, `{"code": "internal_error"}`, client.ShouldRetryHeader, "false"), SimulatedFailure, "internal_error"},
		{"CardDeclined", false, answer(http.StatusPaymentRequired, `{"code": "card_declined"}`), Failed, "card_declined"},
		{"PaymentRejected", false, answer(http.StatusBadGateway, `{"code": "payment_rejected"}`), Failed, "payment_rejected"},
		{"InvalidParams", false, answer(http.StatusUnprocessableEntity, `{"code": "invalid_params"}`), Failed, "invalid_params"},
		{"KeyReused", false, answer(http.StatusUnprocessableEntity, `{"code": "idempotency_key_reused"}`), Failed, "idempotency_key_reused"},
		{"Unauthorized", false, answer(http.StatusUnauthorized, `{"code": "unauthorized"}`), Failed, "unauthorized"},
		{"ReplayedError", false, answer(http.StatusServiceUnavailable, `{"code": "x"}`, "Idempotent-Replayed", "true"), Failed, "x"},
	} {
		t.Run("DoesNotRetry"+tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, Policy{}, tc.answer, created)

			ride := defaultRide(apitest.NewKey())
			ride.RaiseError = tc.raise
			o := b.sim.SendRide(context.Background(), ride)
			require.Equal(t, tc.result, o.Result, "%s", o)
			require.Equal(t, tc.wantCode, o.Code)
			require.Equal(t, 1, o.Attempt)
			require.Empty(t, b.waits.all())
		})
	}
}

func TestNewRide(t *testing.T) {
	t.Parallel()
	sim, err := New(&Config{URL: "http://127.0.0.1:5000", Token: "tok", ErrorRate: 0.5})
	require.NoError(t, err)

	raised := 0
	keys := map[string]bool{}
	// Rounded to six decimals, a point at the edge of the spread may land
	// up to half a millionth beyond it; the float difference adds its own
	// last bits. A tolerance of exactly the spread failed about once in a
	// few hundred runs.
	const rounding = 1e-6
	for range 1000 {
		r := sim.NewRide()
		require.InDelta(t, sfLat, r.OriginLat, spreadLat+rounding)
		require.InDelta(t, sfLon, r.OriginLon, spreadLon+rounding)
		require.InDelta(t, sfLat, r.TargetLat, spreadLat+rounding)
		require.InDelta(t, sfLon, r.TargetLon, spreadLon+rounding)
		require.GreaterOrEqual(t, len(r.Key), rides.MinKeyLength)
		keys[r.Key] = true
		if r.RaiseError {
			raised++
		}
	}
	require.Len(t, keys, 1000, "a fresh key per ride")
	require.InDelta(t, 500, raised, 100, "about half ask for a simulated failure")
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		config *Config
		want   string
	}{
		{nil, "simulator: Config is required"},
		{&Config{URL: "", Token: "tok"}, "Config.URL must be an http or https URL"},
		{&Config{URL: "127.0.0.1:5000", Token: "tok"}, "Config.URL must be an http or https URL"},
		{&Config{URL: "ftp://example.com", Token: "tok"}, "Config.URL must be an http or https URL"},
		{&Config{URL: "http://127.0.0.1:5000", Token: ""}, "Config.Token is required"},
		{&Config{URL: "http://127.0.0.1:5000", Token: "tok", ErrorRate: 1.5}, "Config.ErrorRate must be between 0 and 1"},
		{&Config{URL: "http://127.0.0.1:5000", Token: "tok", MaxPause: -1}, "Config.MaxPause must not be negative"},
		{&Config{URL: "http://127.0.0.1:5000", Token: "tok", Rides: -1}, "Config.Rides must not be negative"},
		{&Config{URL: "http://127.0.0.1:5000", Token: "tok", Retry: Policy{MaxAttempts: -1}}, "Config.Retry.MaxAttempts must not be negative"},
		{&Config{URL: "http://127.0.0.1:5000", Token: "tok", Retry: Policy{MaxDelay: -1}}, "Config.Retry.MaxDelay must not be negative"},
	} {
		_, err := New(tc.config)
		require.ErrorContains(t, err, tc.want, "%+v", tc.config)
	}
}

func TestWaitReady(t *testing.T) {
	t.Parallel()

	t.Run("WaitsForHealthz", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/healthz" || calls.Add(1) < 3 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			_, _ = io.WriteString(w, "ok\n")
		}))
		t.Cleanup(srv.Close)
		sim, err := New(&Config{URL: srv.URL + "/", Token: "tok"})
		require.NoError(t, err)

		require.NoError(t, sim.WaitReady(context.Background(), 10*time.Second))
		require.Equal(t, int32(3), calls.Load())
	})

	t.Run("GivesUpAfterTimeout", func(t *testing.T) {
		t.Parallel()
		// A port nothing listens on: take one and give it back.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		sim, err := New(&Config{URL: "http://" + addr, Token: "tok"})
		require.NoError(t, err)

		err = sim.WaitReady(context.Background(), 600*time.Millisecond)
		require.ErrorContains(t, err, "not ready after 600ms")
		require.ErrorContains(t, err, "connection refused")
	})
}
