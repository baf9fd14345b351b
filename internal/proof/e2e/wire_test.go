package e2e_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet/fleettest"
	"github.com/rocketrides/rocketrides/internal/testkit/invariant"
	"github.com/rocketrides/rocketrides/internal/testkit/netfault"
)

// wireLockTimeout is the lock timeout of the wire tests' processes: short,
// so that a key whose request was cut off is taken over within a test,
// and above the processes' STRIPE_TIMEOUT of 1s, as it must be.
const wireLockTimeout = 2 * time.Second

// seamWindow is how long a request pauses at a seam for a fault to land
// there: the test sees the pause begin in the log and adds the fault at
// once, so the window only has to outlast a busy machine's stall.
const seamWindow = 5 * time.Second

// wiredStack is a stack whose processes reach Postgres and the Stripe
// fake only through links of a fault proxy: each process its own link to
// each, so that a fault lands on one wire. The seed and the checks go
// straight to Postgres.
type wiredStack struct {
	*stack
	proxies *netfault.Proxies
	dbURL   string
}

func newWiredStack(t *testing.T, env ...string) *wiredStack {
	t.Helper()
	dbURL := dbtest.NewURL(t)
	s := newStack(t, dbURL)
	s.fleet.AddEnv(append([]string{"IDEMPOTENCY_LOCK_TIMEOUT=" + wireLockTimeout.String(), "STRIPE_TIMEOUT=1s"}, env...)...)
	ps := netfault.New()
	t.Cleanup(ps.Close)
	return &wiredStack{stack: s, proxies: ps, dbURL: dbURL}
}

// wires is one process's links, and the environment that sends it
// through them.
type wires struct {
	db, stripe *netfault.Link
	env        []string
}

// charged checks every invariant, and that Postgres and the Stripe fake
// both count n charges: each ride charged once, whatever the wire did.
func (s *wiredStack) charged(t *testing.T, n int) {
	t.Helper()
	report := s.check(t, invariant.Options{LockTimeout: wireLockTimeout})
	require.Equal(t, n, report.Charges)
	require.Equal(t, n, s.stripeStats(t)["charges"], "charges at the Stripe fake")
}

// finish retries key with its client until a final answer, which must be
// a 201, and returns it; why says what the test expects of the retries.
func finish(ctx context.Context, t *testing.T, c *client, url, key, why string) reply {
	t.Helper()
	rs, err := c.retryUntilFinal(ctx, []string{url}, key)
	require.NoError(t, err, why)
	final := rs[len(rs)-1]
	require.Equal(t, http.StatusCreated, final.Status, "%s: %s", why, final)
	return final
}

// wire gives process name a link of its own to Postgres and one to the
// Stripe fake.
func (w *wiredStack) wire(t *testing.T, name string) wires {
	t.Helper()
	cfg, err := pgx.ParseConfig(w.dbURL)
	require.NoError(t, err)
	db, err := w.proxies.Link(name+"-postgres", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	require.NoError(t, err)
	dbURL, err := db.URL(w.dbURL)
	require.NoError(t, err)
	u, err := url.Parse(w.stripe.URL)
	require.NoError(t, err)
	stripe, err := w.proxies.Link(name+"-stripe", u.Host)
	require.NoError(t, err)
	stripeURL, err := stripe.URL(w.stripe.URL)
	require.NoError(t, err)
	return wires{db: db, stripe: stripe, env: []string{"DATABASE_URL=" + dbURL, "STRIPE_API_BASE=" + stripeURL}}
}

// add puts faults on link, failing the test if one cannot be added.
func add(t *testing.T, link *netfault.Link, faults ...netfault.Fault) {
	t.Helper()
	for _, f := range faults {
		require.NoError(t, link.Add(f), "%s", f)
	}
}

// partition blackholes both directions of a link: the peer is gone and
// nothing says so.
func partition(t *testing.T, link *netfault.Link) {
	t.Helper()
	add(t, link, netfault.Blackhole("partition-up", netfault.Upstream), netfault.Blackhole("partition-down", netfault.Downstream))
}

// waitLog waits until p has logged line, a failpoint's announcement say.
func waitLog(t *testing.T, p *fleet.Process, line string) {
	t.Helper()
	waitFor(t, time.Minute, p.Name+" to log "+strconv.Quote(line), func() bool { return strings.Contains(p.Log(), line) })
}

// post sends POST /rides with key in the background; the reply comes on
// the channel.
func (c *client) post(ctx context.Context, baseURL, key string) <-chan reply {
	replies := make(chan reply, 1)
	go func() { replies <- c.postRide(ctx, baseURL, key) }()
	return replies
}

// readyz is the api's GET /readyz status, 0 for no answer.
func readyz(api *fleet.Process) int {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(api.URL + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// poolGauge reads one of the api's connection pool gauges
// (rocketrides_db_pool_<name>) from its /metrics at addr; -1 when it
// cannot.
func poolGauge(addr, name string) int {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "rocketrides_db_pool_"+name+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return -1
			}
			return int(n)
		}
	}
	return -1
}

// TestCommitAnswerLost loses the answer to an atomic phase's COMMIT: the
// request pauses inside the phase that records its charge, the api's
// link to Postgres goes dark one way, and the COMMIT goes out. Dark
// downstream, Postgres applies it and the answer is lost; dark upstream,
// it never arrives. The api cannot tell which, and assumes neither: it
// answers 5xx, and the retry with the same key resumes from the key's
// true recovery point, charging the rider once. On both of the key
// store's paths.
func TestCommitAnswerLost(t *testing.T) {
	t.Parallel()
	for _, path := range []struct{ name, pipeline string }{{"Fast", "on"}, {"Plain", "off"}} {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range []struct {
				name    string
				fault   netfault.Fault
				applied bool
			}{
				// Postgres commits, and its answer is dropped.
				{"Applied", netfault.BlackholeFrom("dark", netfault.Downstream, netfault.CommitAnswer), true},
				// Nothing the api sends from the seam on arrives.
				{"NotApplied", netfault.Blackhole("dark", netfault.Upstream), false},
			} {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					s := newWiredStack(t, idem.Pipeline+"="+path.pipeline)
					w := s.wire(t, "api")
					api := fleettest.Start(t, s.fleet, "api", append(w.env, "FAILPOINTS="+rides.FailInRecordCharge+"=sleep:"+seamWindow.String())...)
					c := newClient(s.token, time.Minute)
					key := uuid.NewString()
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()

					replies := c.post(ctx, api.URL, key)
					waitLog(t, api, "failpoint "+rides.FailInRecordCharge+": sleeping")
					add(t, w.db, tc.fault)
					if tc.applied {
						// The COMMIT reached Postgres; the connection that waits
						// for its answer is reset.
						waitFor(t, time.Minute, "the phase to commit", func() bool {
							return s.keyRow(t, key).RecoveryPoint != string(rides.RideCreated)
						})
						w.db.Clear()
						require.NoError(t, w.db.Cut())
					}
					r := <-replies
					require.NoError(t, r.Err, "the api answers: %s", r)
					require.GreaterOrEqual(t, r.Status, 500, "the api cannot know whether the phase committed: %s", r)
					if !tc.applied {
						// The api gave up on its own deadline; Postgres, which
						// hears nothing more of the session, still holds the
						// phase's transaction open, and with it the key's row.
						require.Equal(t, string(rides.RideCreated), s.keyRow(t, key).RecoveryPoint)
					}
					require.Equal(t, 1, s.stripeStats(t)["charges"])

					// Once the lost transaction is over, its key stands at its
					// true recovery point: past the charge if it committed.
					// Postgres ends an uncommitted one on its own, the link
					// still dark, after idle_in_transaction_session_timeout
					// (see localpg), rolling back whatever of it had arrived.
					var at string
					waitFor(t, time.Minute, "the lost transaction to end", func() bool {
						var busy bool
						require.NoError(t, s.pool.QueryRow(ctx, `
							SELECT recovery_point, EXISTS (SELECT FROM pg_stat_activity
								WHERE datname = current_database() AND state LIKE 'idle in transaction%')
							FROM idempotency_keys WHERE idempotency_key = $1`, key).Scan(&at, &busy))
						return !busy
					})
					require.Equal(t, tc.applied, at != string(rides.RideCreated), "recovery point %s", at)
					w.db.Clear()

					final := finish(ctx, t, c, api.URL, key, "the retry finishes the key")
					require.Equal(t, at == string(idem.Finished), final.Replayed, "a finished key is replayed: %s", final)

					row := s.keyRow(t, key)
					require.Equal(t, string(idem.Finished), row.RecoveryPoint)
					require.False(t, row.Locked)
					s.charged(t, 1)
					if tc.applied {
						stats := s.stripeStats(t)
						require.Equal(t, 1, stats["charge_requests"], "the retry resumed past the charge: %v", stats)
					}
				})
			}
		})
	}
}

// TestPostgresBlackholed takes the api's link to Postgres away in both
// directions, without a reset: a half-open connection, as when Postgres's
// host dies. The request caught in it answers 5xx within the api's own
// deadline instead of waiting as long as its client does; the pool drops
// the dead connections; /readyz says the database is gone; and service
// resumes, the caught request finishing once, when the link returns.
func TestPostgresBlackholed(t *testing.T) {
	t.Parallel()
	s := newWiredStack(t)
	w := s.wire(t, "api")
	port, err := fleet.FreePort()
	require.NoError(t, err)
	metricsAddr := "127.0.0.1:" + strconv.Itoa(port)
	// The request pauses once it holds its key, so that the link goes
	// dark under a request in the middle of its phases.
	api := fleettest.Start(t, s.fleet, "api", append(w.env, "METRICS_ADDR="+metricsAddr,
		"FAILPOINTS="+rides.FailAfterClaim+"=sleep:"+seamWindow.String())...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitFor(t, time.Minute, "/readyz to be green", func() bool { return readyz(api) == http.StatusOK })
	require.Positive(t, poolGauge(metricsAddr, "idle_connections"), "the pool keeps a connection")

	const clientTimeout = time.Minute
	c := newClient(s.token, clientTimeout)
	key := uuid.NewString()
	replies := c.post(ctx, api.URL, key)
	waitLog(t, api, "failpoint "+rides.FailAfterClaim+": sleeping")
	partition(t, w.db)

	r := <-replies
	require.NoError(t, r.Err, "the api answers before its client gives up: %s", r)
	require.GreaterOrEqual(t, r.Status, 500, "%s", r)
	require.Less(t, r.Took, clientTimeout, "%s", r)
	waitFor(t, time.Minute, "/readyz to say the database is gone", func() bool {
		return readyz(api) == http.StatusServiceUnavailable
	})
	waitFor(t, time.Minute, "the pool to drop its dead connections", func() bool {
		return poolGauge(metricsAddr, "idle_connections") == 0
	})

	w.db.Clear()
	waitFor(t, time.Minute, "/readyz to be green again", func() bool { return readyz(api) == http.StatusOK })
	finish(ctx, t, c, api.URL, key, "the caught request finishes")
	fresh := c.postRide(ctx, api.URL, uuid.NewString())
	require.True(t, fresh.fresh(), "a new request goes through at once: %s", fresh)

	s.charged(t, 2)
}

// TestStripeAnswerLost loses Stripe's answer to a charge at the TCP
// level, after the fake has charged: the connection is reset, or the
// answer never comes and the attempt times out. The api answers 503,
// and the retry with the same key finds the charge through its Stripe
// idempotency key instead of making another.
func TestStripeAnswerLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fault netfault.Fault
	}{
		{"Reset", netfault.Reset("lost", netfault.Downstream)},
		{"Blackhole", netfault.Blackhole("lost", netfault.Downstream)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The shortest attempt the api allows, so that a lost answer
			// costs a second.
			s := newWiredStack(t)
			w := s.wire(t, "api")
			api := fleettest.Start(t, s.fleet, "api", w.env...)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c := newClient(s.token, time.Minute)
			key := uuid.NewString()

			add(t, w.stripe, tc.fault)
			r := c.postRide(ctx, api.URL, key)
			require.NoError(t, r.Err, "%s", r)
			require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r)
			require.Equal(t, 1, s.stripeStats(t)["charges"], "the fake charged; the api never heard")
			require.Equal(t, string(rides.RideCreated), s.keyRow(t, key).RecoveryPoint)

			require.NoError(t, w.stripe.Remove("lost"))
			final := finish(ctx, t, c, api.URL, key, "the retry finishes the key")
			require.False(t, final.Replayed, "%s", final)
			s.charged(t, 1) // the retry found the charge and made none
		})
	}
}

// TestCompleterPartitioned cuts the completer off from Postgres while it
// holds a key: it has charged and is about to record the charge. The
// key's lock goes stale, the client's retry takes the key over, finds
// the charge through the Stripe key and finishes the request; when the
// completer comes back, its phase is fenced off. One charge.
func TestCompleterPartitioned(t *testing.T) {
	t.Parallel()
	s := newWiredStack(t)
	apiWires := s.wire(t, "api")
	api := fleettest.Start(t, s.fleet, "api", apiWires.env...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newClient(s.token, time.Minute)

	// A request that failed before its charge: the completer's work.
	failing := fleettest.Start(t, s.fleet, "api", append(s.wire(t, "failing-api").env,
		"FAILPOINTS="+rides.FailBeforeCharge+"=error")...)
	key := uuid.NewString()
	r := c.postRide(ctx, failing.URL, key)
	require.Equal(t, http.StatusInternalServerError, r.Status, "%s", r)
	require.NoError(t, failing.Stop(ctx))

	cw := s.wire(t, "completer")
	completer := fleettest.Start(t, s.fleet, "completer", append(cw.env,
		"COMPLETER_MIN_AGE=1ms", "COMPLETER_RETRY_INTERVAL=1ms", "COMPLETER_POLL_INTERVAL=100ms",
		"FAILPOINTS="+rides.FailAfterCharge+"=sleep:"+seamWindow.String())...)
	waitLog(t, completer, "failpoint "+rides.FailAfterCharge+": sleeping")
	partition(t, cw.db)
	require.Equal(t, 1, s.stripeStats(t)["charges"])
	require.True(t, s.keyRow(t, key).Locked, "the completer holds the key")

	final := finish(ctx, t, c, api.URL, key, "the key is taken over once its lock is stale")
	require.False(t, final.Replayed, "the retry finished it, not the completer: %s", final)

	// The completer's phase fails, on its deadline or on the connection
	// the lifted partition closes; it never completes the key.
	cw.db.Clear()
	waitLog(t, completer, "Abandoned request failed again")
	require.NotContains(t, completer.Log(), "Completed abandoned request")
	s.charged(t, 1)
	again := c.postRide(ctx, api.URL, key)
	require.True(t, again.Replayed, "%s", again)
	require.Equal(t, string(final.Body), string(again.Body))
}

// TestSlowLinks slows every wire down instead of cutting it: latency
// with jitter, a thin pipe and sliced packets between the api and
// Postgres while two clients race for each key, then the enqueuer's and
// the worker's links slowed and cut while the receipts drain. Every
// invariant holds, and each receipt is sent once.
func TestSlowLinks(t *testing.T) {
	t.Parallel()
	s := newWiredStack(t)
	w := s.wire(t, "api")
	api := fleettest.Start(t, s.fleet, "api", w.env...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	add(t, w.db,
		netfault.Latency("latency", netfault.Downstream, 100*time.Millisecond, 100*time.Millisecond),
		netfault.Bandwidth("thin", netfault.Downstream, 8),
		netfault.Slice("sliced", netfault.Upstream, 16, 0))
	add(t, w.stripe, netfault.Latency("latency", netfault.Upstream, 50*time.Millisecond, 50*time.Millisecond))

	// Two clients per key: one holds the key while the other is refused
	// 409 and retries until the replay.
	const n = 4
	c := newClient(s.token, time.Minute)
	keys := make([]string, n)
	errs := make(chan error, 2*n)
	for i := range keys {
		keys[i] = uuid.NewString()
		for range 2 {
			go func() {
				_, err := c.retryUntilFinal(ctx, []string{api.URL}, keys[i])
				errs <- err
			}()
		}
	}
	for range 2 * n {
		require.NoError(t, <-errs)
	}
	s.charged(t, n)

	mailDir := t.TempDir()
	ew, ww := s.wire(t, "enqueuer"), s.wire(t, "worker")
	for _, link := range []*netfault.Link{ew.db, ww.db} {
		add(t, link,
			netfault.Latency("latency", netfault.Downstream, 50*time.Millisecond, 50*time.Millisecond),
			netfault.Slice("sliced", netfault.Downstream, 16, 0))
	}
	fleettest.Start(t, s.fleet, "enqueuer", append(ew.env, "ENQUEUER_POLL_INTERVAL=100ms")...)
	fleettest.Start(t, s.fleet, "worker", append(ww.env, "MAIL_DIR="+mailDir)...)
	waitFor(t, time.Minute, "a first receipt", func() bool { return len(mails(t, mailDir)) > 0 })
	// Every connection of both, cut at once, in the middle of the drain.
	require.NoError(t, ew.db.Cut())
	require.NoError(t, ww.db.Cut())
	waitFor(t, 2*time.Minute, "every receipt to be sent", func() bool {
		report, err := invariant.Check(ctx, s.pool, invariant.NewStripeClient(s.stripe.URL, stripeKey),
			invariant.Options{LockTimeout: wireLockTimeout, ReceiptsDrained: true})
		return err == nil && report.OK()
	})
	report := s.check(t, invariant.Options{LockTimeout: wireLockTimeout, ReceiptsDrained: true})
	require.Equal(t, n, report.Receipts)
	require.Len(t, mails(t, mailDir), n, "each receipt sent once")
}
