package bench

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketrides/rocketrides/internal/api"
	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/platform/metrics"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/user"
)

// apiHandler is the api's own HTTP handler on pool, charging through the
// Stripe at stripeURL, wired by rides.Settings as cmd/api wires it, on the
// key store's plain path if plain (IDEMPOTENCY_PIPELINE=off). It is the
// one place the bench builds product services; everywhere else it runs
// the commands.
func apiHandler(pool *pgxpool.Pool, stripeURL string, plain bool) (http.Handler, error) {
	quiet := slog.New(slog.DiscardHandler)
	settings := rides.Settings{Stripe: payment.Config{APIKey: stripeKey, BaseURL: stripeURL}, Plain: plain}
	svc, _, err := settings.NewService(context.Background(), pool, metrics.NewRegistry(), quiet)
	if err != nil {
		return nil, err
	}
	ridesHandler, err := rides.NewHandler(&rides.HandlerConfig{Service: svc, Pool: pool, Logger: quiet})
	if err != nil {
		return nil, err
	}
	return api.New(&api.Config{Pool: pool, Logger: quiet, Rides: ridesHandler})
}

// statement is one statement the api sent, in round trip trip: alone, or
// in a pipelined batch (an atomic phase sends one: BEGIN, the fence, its
// writes, the new recovery point and COMMIT).
type statement struct {
	trip     int
	pipeline bool
	sql      string
	args     []any     // as the code passed them
	oids     []uint32  // each parameter's type, as Postgres inferred it
	text     []*string // each argument as Postgres reads it; nil is NULL
}

// tracer records what a pool sends, one request at a time: no lock.
type tracer struct {
	stmts []statement
	trips int
}

func (t *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	t.trips++
	t.stmts = append(t.stmts, statement{trip: t.trips, sql: d.SQL, args: slices.Clone(d.Args)})
	return ctx
}

func (t *tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	t.trips++
	for _, q := range d.Batch.QueuedQueries {
		t.stmts = append(t.stmts, statement{trip: t.trips, pipeline: true, sql: q.SQL, args: slices.Clone(q.Arguments)})
	}
	return ctx
}

func (*tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData)     {}
func (*tracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// capture is what the api sent Postgres for a new ride, a second new ride
// and a replay of the first. dynamic holds what a replay of them must make
// new for each ride (see dynamics).
type capture struct {
	ride, ride2, replay []statement
	userID              int64
	user                user.User // the capture's user, as the scripts check it (addUser)
	dynamic             map[string]string
}

// addUser gives the database q is on the capture's user, with its token,
// email and Stripe customer, which the api checks in the claim's round
// trip (user.HoldsToken), and returns the user's id there: the user a
// script runs as.
func (c *capture) addUser(ctx context.Context, q user.Querier) (int64, error) {
	u, err := user.Upsert(ctx, q, c.user.Email, c.user.StripeCustomerID, captureToken)
	return u.ID, err
}

const captureToken = "rr_bench_token_capture_0123456789"

// seqSpacing spreads the capture database's sequences apart: sequence i
// hands out values from (i+1)*seqSpacing, so that an id in a statement
// names the sequence it came from.
const seqSpacing = 10_000_000

// captureRides runs two rides and a replay through the api's handler and
// the Stripe fake, in this process, on the migrated database at url, with
// a tracer on the pool; on the key store's plain path if plain.
func captureRides(ctx context.Context, url string, plain bool) (*capture, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	rec := &tracer{}
	cfg.ConnConfig.Tracer = rec
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	var sequences []string
	if err := pool.QueryRow(ctx, `
		SELECT array_agg(name ORDER BY n) FROM (
			SELECT name, n, setval(name::regclass, n * $1, false)
			FROM (SELECT format('%I.%I', schemaname, sequencename) AS name, row_number() OVER () AS n
			      FROM pg_sequences) AS s) AS t`, seqSpacing).Scan(&sequences); err != nil {
		return nil, fmt.Errorf("spread sequences: %w", err)
	}
	fake, err := fakestripe.New(nil)
	if err != nil {
		return nil, err
	}
	stripe := httptest.NewServer(fake)
	defer stripe.Close()
	handler, err := apiHandler(pool, stripe.URL, plain)
	if err != nil {
		return nil, err
	}
	gateway, err := payment.New(&payment.Config{APIKey: stripeKey, BaseURL: stripe.URL})
	if err != nil {
		return nil, err
	}
	customer, err := gateway.CreateCustomer(ctx, "capture@example.com", "tok_visa", "bench-capture")
	if err != nil {
		return nil, err
	}
	u, err := user.Upsert(ctx, pool, "capture@example.com", customer, captureToken)
	if err != nil {
		return nil, err
	}
	c := &capture{userID: u.ID, user: u}
	// A request refused before its claim, which leaves no row: the api
	// looks the token up and remembers its user, as for any client's
	// first request, so that both rides below are sent as every later
	// one is (package api, remember.go).
	warm := httptest.NewRequestWithContext(ctx, http.MethodPost, "/rides", strings.NewReader("{}"))
	warm.Header = http.Header{"Authorization": {"Bearer " + captureToken}, "Idempotency-Key": {uuid.NewString()},
		"Content-Type": {"application/json"}}
	w := httptest.NewRecorder()
	handler.ServeHTTP(w, warm)
	if w.Code != http.StatusUnprocessableEntity {
		return nil, fmt.Errorf("the request before the capture: status %d, want 422: %s", w.Code, w.Body)
	}
	keys := []string{uuid.NewString(), uuid.NewString()}
	for i, out := range []*[]statement{&c.ride, &c.ride2, &c.replay} {
		rec.stmts = nil
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/rides", bytes.NewReader(rideBody))
		req.Header = http.Header{"Authorization": {"Bearer " + captureToken}, "Idempotency-Key": {keys[i%2]},
			"Content-Type": {"application/json"}}
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, req)
		if replay := w.Header().Get("Idempotent-Replayed") == "true"; w.Code != http.StatusCreated || replay != (i == 2) {
			return nil, fmt.Errorf("captured request %d: status %d, replayed %v: %s", i+1, w.Code, replay, w.Body)
		}
		*out = rec.stmts
		if err := pool.AcquireFunc(ctx, func(conn *pgxpool.Conn) error { return describe(ctx, conn.Conn(), *out) }); err != nil {
			return nil, err
		}
	}
	c.dynamic, err = dynamics(c.ride, c.ride2, sequences)
	return c, err
}

// describe fills in each statement's parameter types, and its arguments
// as text as pgx encoded them.
func describe(ctx context.Context, conn *pgx.Conn, stmts []statement) error {
	for i := range stmts {
		s := &stmts[i]
		sd, err := conn.PgConn().Prepare(ctx, "", s.sql, nil)
		if err != nil {
			return fmt.Errorf("describe %q: %w", s.sql, err)
		}
		s.oids = sd.ParamOIDs
		for k, a := range s.args {
			b, err := conn.TypeMap().Encode(s.oids[k], pgtype.TextFormatCode, a, []byte{})
			if err != nil {
				return fmt.Errorf("encode argument %d of %q: %w", k+1, s.sql, err)
			}
			var text *string // NULL
			if b != nil {
				text = new(string(b))
			}
			s.text = append(s.text, text)
		}
	}
	return nil
}

// roundTrips is how many round trips a new ride took, the token's
// look-up included; 0 before the capture.
func (c *capture) roundTrips() int {
	if c == nil {
		return 0
	}
	trips := map[int]bool{}
	for _, s := range c.ride {
		trips[s.trip] = true
	}
	return len(trips)
}

// pathFigures are what the capture says of a new ride's cost: its round
// trips and statements.
func (c *capture) pathFigures() PathFigures {
	return PathFigures{RoundTrips: c.roundTrips(), Statements: len(c.ride)}
}

// rideExpr is a text that is new for each ride pgbench runs: of the run,
// the client and the client's ride count.
const rideExpr = "('-' || :run::text || '-' || :client_id::text || '-' || :n::text)"

// dynamics compares two captured rides argument by argument: what differs
// a replay must make new for each ride. It maps each such value to what
// a replay sends instead, %s standing for the value: an id becomes the
// session's last value of its sequence (in a subquery, so that it can be an
// index condition); a lock token, a client's key or a charge id is made
// unique; JSON (a stored response, a job's arguments) stays. Any other
// change is an error, which fails the bench's test: better than measuring
// a ride the script does not reproduce.
func dynamics(ride, ride2 []statement, sequences []string) (map[string]string, error) {
	d := map[string]string{}
	if len(ride) != len(ride2) {
		return nil, fmt.Errorf("two rides sent %d and %d statements", len(ride), len(ride2))
	}
	for i, s := range ride {
		if s2 := ride2[i]; s.sql != s2.sql || s.trip-ride[0].trip != s2.trip-ride2[0].trip || s.pipeline != s2.pipeline {
			return nil, fmt.Errorf("statement %d differs between two rides: %q", i+1, s.sql)
		}
		for k, v := range s.text {
			if w := ride2[i].text[k]; v == nil || w != nil && *v == *w {
				continue
			}
			switch n, err := strconv.ParseInt(*v, 10, 64); {
			case err == nil && n >= seqSpacing && int(n/seqSpacing) <= len(sequences):
				d[*v] = fmt.Sprintf("(SELECT currval('%s'))", sequences[n/seqSpacing-1])
			case err == nil:
				return nil, fmt.Errorf("argument %d of %q changes from ride to ride and comes from no sequence", k+1, s.sql)
			case s.oids[k] == pgtype.UUIDOID:
				d[*v] = "md5(%s::text || " + rideExpr + ")::uuid"
			case s.oids[k] == pgtype.TextOID || s.oids[k] == pgtype.VarcharOID:
				d[*v] = "(%s::text || " + rideExpr + ")"
			}
		}
	}
	return d, nil
}

var placeholder = regexp.MustCompile(`\$\d+`)

// script renders stmts as a pgbench script, round trip for round trip,
// with the -D name=value definitions of the captured values it reads; it
// also needs -D uid=<user id> -D run=<new for each pgbench run> -D n=0.
func (c *capture) script(stmts []statement) (string, []string) {
	names := map[string]string{}
	var defs []string
	var b strings.Builder
	b.WriteString("-- Statements the api sent, captured with a pgx tracer (internal/proof/bench/capture.go).\n\\set n :n + 1\n")
	for i, s := range stmts {
		if s.pipeline && (i == 0 || stmts[i-1].trip != s.trip) {
			b.WriteString("\\startpipeline\n")
		}
		b.WriteString(strings.TrimSuffix(strings.TrimSpace(placeholder.ReplaceAllStringFunc(s.sql, func(p string) string {
			k, _ := strconv.Atoi(p[1:])
			v := s.text[k-1]
			if v == nil {
				return "NULL"
			} else if *v == strconv.FormatInt(c.userID, 10) {
				return ":uid"
			}
			expr := cmp.Or(c.dynamic[*v], "%s")
			if _, ok := names[*v]; !ok && strings.Contains(expr, "%s") {
				names[*v] = fmt.Sprintf("c%d", len(names))
				defs = append(defs, names[*v]+"="+*v)
			}
			return strings.ReplaceAll(expr, "%s", ":"+names[*v])
		})), ";") + ";\n")
		if s.pipeline && (i == len(stmts)-1 || stmts[i+1].trip != s.trip) {
			b.WriteString("\\endpipeline\n")
		}
	}
	return b.String(), defs
}

// pgbenchResult is what pgbench reported.
type pgbenchResult struct {
	TPS, LatencyMs    float64
	Processed, Failed int64
}

var pgbenchRe = regexp.MustCompile(`(?m)^(tps|number of transactions actually processed|number of failed transactions|latency average)(?:: | = )([0-9.]+)`)

// parsePgbench reads pgbench's summary.
func parsePgbench(out string) (pgbenchResult, error) {
	var res pgbenchResult
	for _, m := range pgbenchRe.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		switch m[1] {
		case "tps":
			res.TPS = v
		case "latency average":
			res.LatencyMs = v
		case "number of failed transactions":
			res.Failed = int64(v)
		default:
			res.Processed = int64(v)
		}
	}
	if res.TPS == 0 {
		return res, fmt.Errorf("no tps in pgbench output:\n%s", out)
	}
	return res, nil
}

// pgbench runs stmts as a pgbench script (written to path) with args, as
// user uid, against url (see runPgbench).
func (c *capture) pgbench(ctx context.Context, cluster localpg.Cluster, url, path string, stmts []statement, uid int64,
	env []string, args ...string) (string, error) {
	script, defs := c.script(stmts)
	return runPgbench(ctx, cluster, url, path, script, defs, uid, env, args...)
}

// pgbenchAt runs script (with defs, as user uid, -D run=run) against
// database db for d at clients clients, and returns what pgbench measured.
// The script goes to file in the bench's data directory.
func (r *run) pgbenchAt(ctx context.Context, db, file, script string, defs []string, uid int64, run string,
	clients int, d time.Duration) (pgbenchResult, error) {
	out, err := runPgbench(ctx, r.cluster, r.cluster.DatabaseURL(db), filepath.Join(r.cfg.DataDir, file), script, defs, uid, nil,
		"-D", "run="+run, "-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 2)), "-T", strconv.Itoa(int(d.Seconds())))
	if err != nil {
		return pgbenchResult{}, err
	}
	return parsePgbench(out)
}

// limitAgain runs pgbench on the captured ride at the limit step's best
// client count once more, for a short step, and adds its rate: the
// ceiling as the machine runs now. Minutes after the limit step, a shared
// machine may run at another speed, and the new rides are held to the
// ceiling at the speed they ran at as well as to the limit step's.
func (r *run) limitAgain(ctx context.Context) error {
	script, defs := r.capture.script(r.capture.ride)
	res, err := r.pgbenchAt(ctx, limitDB, "ride.sql", script, defs, r.limitUID, r.runID+"again", r.bestAt, r.sz.short)
	if err != nil {
		return err
	}
	r.limitNear = res.TPS
	r.add(Figure{Step: "2 new rides", Name: "one ride's SQL (pgbench), just before the new rides at 32 clients", Clients: r.bestAt,
		Value: res.TPS, Unit: "rides/s", Errors: int(res.Failed), Note: fmt.Sprintf("latency avg %.1f ms; the ceiling again, at the machine's speed now", res.LatencyMs)})
	return nil
}

// stepLimit measures the ceiling: pgbench running the captured ride on a
// freshly migrated database, as a user with the capture's API token; then
// the minimal design's (cost.go) at the same client counts, the reference
// the api's own SQL is held to; then what each costs, statement by
// statement, and what a replay costs.
func (r *run) stepLimit(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, r.cluster.DatabaseURL(limitDB))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	uid, err := r.capture.addUser(ctx, conn)
	if err != nil {
		return err
	}
	r.limitUID = uid
	minimalUID, err := r.createMinimal(ctx, conn, minimalDB, "")
	if err != nil {
		return err
	}
	rideScript, rideDefs := r.capture.script(r.capture.ride)
	for _, w := range []struct {
		name, db, file, script string
		defs                   []string
		uid                    int64
		rates                  map[int]float64
		best                   *int
	}{
		{"one ride's SQL", limitDB, "ride.sql", rideScript, rideDefs, uid, r.limit, &r.bestAt},
		{"minimal design's SQL", minimalDB, "minimal.sql", minimalScript, nil, minimalUID, r.minimal, &r.minimalAt},
	} {
		for i, clients := range r.sz.pgbenchClients {
			d := r.sz.short
			if clients == 32 {
				d = r.sz.step
			}
			res, err := r.pgbenchAt(ctx, w.db, w.file, w.script, w.defs, w.uid, fmt.Sprintf("%s%d", r.runID, i), clients, d)
			if err != nil {
				return err
			}
			if w.rates[clients] = res.TPS; res.TPS > w.rates[*w.best] {
				*w.best = clients
			}
			note := fmt.Sprintf("latency avg %.1f ms", res.LatencyMs)
			if clients == r.report.Machine.APIPoolSize {
				note += "; the api's pool size"
			}
			r.add(Figure{Step: "1 limit (pgbench)", Name: w.name, Clients: clients, Value: res.TPS, Unit: "rides/s",
				Errors: int(res.Failed), Note: note})
		}
	}
	// One after the other, so that whatever else the machine runs weighs
	// on each alike: a new ride, its replay (the same keys, made again by
	// the same run and clients), the minimal design.
	replayScript, replayDefs := r.capture.script(r.capture.replay)
	run := "cost-" + r.runID
	own, err := r.account(ctx, "new ride", limitDB, filepath.Join(r.cfg.DataDir, "ride.sql"), rideScript, rideDefs, uid, run)
	if err != nil {
		return err
	}
	if _, err := r.account(ctx, "replay", limitDB, filepath.Join(r.cfg.DataDir, "replay.sql"), replayScript, replayDefs, uid, run); err != nil {
		return err
	}
	minimal, err := r.account(ctx, "minimal design", minimalDB, filepath.Join(r.cfg.DataDir, "minimal.sql"), minimalScript, nil, minimalUID, run)
	if err != nil {
		return err
	}
	r.add(Figure{Step: "1b cost per ride", Name: "new ride vs minimal design, Postgres CPU", Value: ms(own.cpu) / ms(minimal.cpu), Unit: "x",
		Note: fmt.Sprintf("WAL %.2f x, statement time %.2f x", own.wal/minimal.wal, ms(own.statements)/ms(minimal.statements))})
	return nil
}
