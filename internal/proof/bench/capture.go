package bench

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketrides/rocketrides/internal/api"
	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/user"
)

// apiHandler is the api's own HTTP handler on pool, charging through the
// Stripe at stripeURL, and its Stripe client. It is the one place the
// bench builds product services; everywhere else it runs the commands.
func apiHandler(pool *pgxpool.Pool, stripeURL string) (http.Handler, *payment.Gateway) {
	quiet := slog.New(slog.DiscardHandler)
	gateway := payment.New(payment.Config{APIKey: stripeKey, BaseURL: stripeURL})
	svc := rides.NewService(rides.Config{Pool: pool, Keys: idem.NewStore(pool, idem.Config{}), Payments: gateway, Logger: quiet})
	return api.NewHandler(api.Config{Pool: pool, Logger: quiet,
		Rides: rides.NewHandler(rides.HandlerConfig{Service: svc, Pool: pool, Logger: quiet})}), gateway
}

// trip is one round trip to Postgres: a statement, or a pipelined batch
// (each atomic phase sends two: BEGIN, the fence and its first writes,
// then the rest, the new recovery point and COMMIT).
type trip struct {
	pipeline bool
	stmts    []statement
}

type statement struct {
	sql  string
	args []any     // as the code passed them
	oids []uint32  // each parameter's type, as Postgres inferred it
	text []*string // each argument as Postgres reads it; nil is NULL
}

// tracer records what a pool sends, round trip by round trip. Requests
// are captured one at a time, so it needs no lock.
type tracer struct{ trips []trip }

func (t *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	t.trips = append(t.trips, trip{stmts: []statement{{sql: d.SQL, args: slices.Clone(d.Args)}}})
	return ctx
}

func (t *tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	tr := trip{pipeline: true}
	for _, q := range d.Batch.QueuedQueries {
		tr.stmts = append(tr.stmts, statement{sql: q.SQL, args: slices.Clone(q.Arguments)})
	}
	t.trips = append(t.trips, tr)
	return ctx
}

func (*tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData)     {}
func (*tracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// capture is what the api sent Postgres for a new ride, a second new ride
// and a replay of the first.
type capture struct {
	ride, ride2, replay []trip
	userID              int64
	// dynamic holds the arguments that differ between the two rides: what
	// a replay must make new for each ride (see dynamics).
	dynamic map[string]dynamic
}

const captureToken = "rr_bench_token_capture_0123456789"

// seqSpacing spreads the capture database's sequences apart: sequence i
// hands out values from (i+1)*seqSpacing, so that an id in a statement
// names the sequence it came from.
const seqSpacing = 10_000_000

// captureRides runs two rides and a replay through the api's handler and
// the Stripe fake, in this process, on the migrated database at url, with
// a tracer on the pool.
func captureRides(ctx context.Context, url string) (*capture, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	rec := &tracer{}
	cfg.ConnConfig.Tracer = rec
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open capture database: %w", err)
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
	stripe := httptest.NewServer(fakestripe.New(fakestripe.Options{}))
	defer stripe.Close()
	handler, gateway := apiHandler(pool, stripe.URL)
	customer, err := gateway.CreateCustomer(ctx, "capture@example.com", "tok_visa", "bench-capture")
	if err != nil {
		return nil, err
	}
	u, err := user.Upsert(ctx, pool, "capture@example.com", customer, captureToken)
	if err != nil {
		return nil, err
	}
	c := &capture{userID: u.ID}
	keys := []string{uuid.NewString(), uuid.NewString()}
	for i, out := range []*[]trip{&c.ride, &c.ride2, &c.replay} {
		rec.trips = nil
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/rides", bytes.NewReader(rideBody))
		req.Header.Set("Authorization", "Bearer "+captureToken)
		req.Header.Set("Idempotency-Key", keys[i%2])
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, req)
		if replay := w.Header().Get("Idempotent-Replayed") == "true"; w.Code != http.StatusCreated || replay != (i == 2) {
			return nil, fmt.Errorf("captured request %d: status %d, replayed %v: %s", i+1, w.Code, replay, w.Body)
		}
		*out = rec.trips
		if err := pool.AcquireFunc(ctx, func(conn *pgxpool.Conn) error { return describe(ctx, conn.Conn(), *out) }); err != nil {
			return nil, err
		}
	}
	c.dynamic, err = dynamics(c.ride, c.ride2, sequences)
	return c, err
}

// describe fills in each statement's parameter types, and its arguments
// as text as pgx encoded them.
func describe(ctx context.Context, conn *pgx.Conn, trips []trip) error {
	for _, t := range trips {
		for i := range t.stmts {
			s := &t.stmts[i]
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
				v := string(b)
				s.text = append(s.text, map[bool]*string{true: &v}[b != nil])
			}
		}
	}
	return nil
}

// What a replay sends in place of an argument that changes from ride to
// ride.
type dynamic struct {
	sequence string // an id: this session's last value of the sequence
	uuid     bool   // a lock token, made new for each ride; otherwise a text (a key, a charge id), likewise
}

// dynamics compares two captured rides argument by argument: what differs
// between them is what a replay must make new for each ride. Anything it
// cannot make new is an error, so that a ride the bench cannot replay
// fails the bench's test instead of being measured wrongly. Other values
// (JSON: a stored response, a job's arguments) are sent as captured.
func dynamics(ride, ride2 []trip, sequences []string) (map[string]dynamic, error) {
	d := map[string]dynamic{}
	if len(ride) != len(ride2) {
		return nil, fmt.Errorf("two rides took %d and %d round trips", len(ride), len(ride2))
	}
	for i, t := range ride {
		if t.pipeline != ride2[i].pipeline || len(t.stmts) != len(ride2[i].stmts) {
			return nil, fmt.Errorf("round trip %d differs between two rides", i+1)
		}
		for j, s := range t.stmts {
			s2 := ride2[i].stmts[j]
			if s.sql != s2.sql || len(s.text) != len(s2.text) {
				return nil, fmt.Errorf("statement %d of round trip %d differs between two rides: %q", j+1, i+1, s.sql)
			}
			for k, v := range s.text {
				if w := s2.text[k]; v == nil || w != nil && *v == *w {
					continue
				}
				switch n, err := strconv.ParseInt(*v, 10, 64); {
				case err == nil && n >= seqSpacing && int(n/seqSpacing) <= len(sequences):
					d[*v] = dynamic{sequence: sequences[n/seqSpacing-1]}
				case err == nil:
					return nil, fmt.Errorf("argument %d of %q changes from ride to ride and comes from no sequence", k+1, s.sql)
				case s.oids[k] == pgtype.UUIDOID:
					d[*v] = dynamic{uuid: true}
				case s.oids[k] == pgtype.TextOID || s.oids[k] == pgtype.VarcharOID:
					d[*v] = dynamic{}
				}
			}
		}
	}
	return d, nil
}

var placeholder = regexp.MustCompile(`\$\d+`)

// script renders trips as a pgbench script, round trip for round trip, with
// the -D name=value definitions of the captured values it reads; it also
// needs -D uid=<user id> -D run=<new for each pgbench run> -D n=0. Where an
// argument changes from ride to ride it sends an expression of the run,
// the client and the ride's number, :n, so that every ride is new.
func (c *capture) script(trips []trip) (string, []string) {
	const ride = "('-' || :run::text || '-' || :client_id::text || '-' || :n::text)"
	names := map[string]string{}
	var defs []string
	constant := func(v string) string {
		if _, ok := names[v]; !ok {
			names[v] = fmt.Sprintf("c%d", len(names))
			defs = append(defs, names[v]+"="+v)
		}
		return ":" + names[v]
	}
	var b strings.Builder
	b.WriteString("-- Statements the api sent, captured with a pgx tracer (internal/proof/bench/capture.go).\n\\set n :n + 1\n")
	for _, t := range trips {
		b.WriteString(map[bool]string{true: "\\startpipeline\n"}[t.pipeline])
		for _, s := range t.stmts {
			sql := placeholder.ReplaceAllStringFunc(s.sql, func(p string) string {
				k, _ := strconv.Atoi(p[1:])
				v := s.text[k-1]
				if v == nil {
					return "NULL"
				} else if *v == strconv.FormatInt(c.userID, 10) {
					return ":uid"
				}
				switch dyn, ok := c.dynamic[*v]; {
				case !ok:
					return constant(*v)
				case dyn.sequence != "":
					// A subquery, not a bare volatile call, so that it can
					// be an index condition.
					return fmt.Sprintf("(SELECT currval('%s'))", dyn.sequence)
				case dyn.uuid:
					return "md5(" + constant(*v) + "::text || " + ride + ")::uuid"
				}
				return "(" + constant(*v) + "::text || " + ride + ")"
			})
			b.WriteString(strings.TrimSuffix(strings.TrimSpace(sql), ";") + ";\n")
		}
		b.WriteString(map[bool]string{true: "\\endpipeline\n"}[t.pipeline])
	}
	return b.String(), defs
}
