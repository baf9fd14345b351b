package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/rocketrides/rocketrides/internal/audit"
	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/jobs"
	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/platform/trace"
	"github.com/rocketrides/rocketrides/internal/reconcile"
	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/user"
)

// whenLayout is how every page shows a time: in UTC, and saying so, so
// that operators in different zones, and the logs, agree on it. The
// overview's live clock (console.js) shows UTC too.
const whenLayout = "2006-01-02 15:04:05.000 UTC"

var funcs = template.FuncMap{
	"when": func(t time.Time) string { return t.UTC().Format(whenLayout) },
	"whenp": func(t *time.Time) string {
		if t == nil {
			return "—"
		}
		return t.UTC().Format(whenLayout)
	},
	"str": func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	},
	"amount": jobs.FormatAmount,
	"json": func(b []byte) string {
		var out bytes.Buffer
		if err := json.Indent(&out, b, "", "  "); err != nil {
			return string(b)
		}
		return out.String()
	},
	"why": why,
}

func (c *Console) parseTemplates() error {
	for _, name := range []string{"login", "overview", "story", "search", "attention", "abandoned", "reconciliation", "doc", "lab"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return fmt.Errorf("console: parse template %s: %w", name, err)
		}
		c.pages[name] = t
	}
	return nil
}

// render writes page with data; a session, when there is one, gives the
// layout the operator's name and the form token.
func (c *Console) render(w http.ResponseWriter, r *http.Request, page string, s *session, data map[string]any) {
	c.renderStatus(w, r, http.StatusOK, page, s, data)
}

// renderStatus is render with another status than 200 OK: a page that
// says what was wrong with the request.
func (c *Console) renderStatus(w http.ResponseWriter, r *http.Request, status int, page string, s *session, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	data["Page"] = page
	if s != nil {
		data["Operator"], data["CSRF"] = s.Operator, csrf(s)
	}
	data["HasLab"] = c.lab != nil
	var buf bytes.Buffer
	if err := c.pages[page].ExecuteTemplate(&buf, "layout", data); err != nil {
		c.fail(w, r, fmt.Errorf("render %s: %w", page, err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (c *Console) fail(w http.ResponseWriter, r *http.Request, err error) {
	c.logger.ErrorContext(r.Context(), "Console page failed", slog.String("path", r.URL.Path), slog.Any("error", err))
	http.Error(w, "Something went wrong; the console's log says what.", http.StatusInternalServerError)
}

// Overview is what the overview shows, and what /events streams.
type Overview struct {
	At             time.Time                  `json:"at"`
	Points         map[idem.RecoveryPoint]int `json:"points"`
	InFlight       int                        `json:"in_flight"`
	Stale          int                        `json:"stale"`
	Released       int                        `json:"released"`
	Finished       int                        `json:"finished"`
	NeedsAttention int                        `json:"needs_attention"`
	Rides          map[string]int             `json:"rides"`
	RidesPerSecond float64                    `json:"rides_per_second"`
	Staged         int                        `json:"staged"`
	Jobs           map[string]int             `json:"jobs"`
	Reconciled     string                     `json:"reconciled"`
	Findings       int                        `json:"findings"`
	// Commits says who confirms a commit before it is acknowledged, as
	// the api's /readyz does (db.CheckDurability).
	Commits string `json:"commits"`
}

// overviewPoints are the recovery points the overview counts unfinished
// keys at: each of an unfinished ride request, in the order it passes
// them, then, by name, any other that counts holds (the table is every
// endpoint's), rather than leave its keys out. Finished keys are counted
// by lock state.
func overviewPoints(counts map[idem.RecoveryPoint]int) []idem.RecoveryPoint {
	var points, others []idem.RecoveryPoint
	for _, p := range rides.RecoveryPoints {
		if p != idem.Finished {
			points = append(points, p)
		}
	}
	for p := range counts {
		if !slices.Contains(rides.RecoveryPoints, p) {
			others = append(others, p)
		}
	}
	slices.Sort(others)
	return append(points, others...)
}

// ratePeriod is the window new rides per second are counted over.
const ratePeriod = 10 * time.Second

func (c *Console) snapshot(ctx context.Context) (*Overview, error) {
	o := &Overview{At: time.Now(), Points: map[idem.RecoveryPoint]int{}, Rides: map[string]int{}, Jobs: map[string]int{}}
	counts, err := c.keys.Count(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range overviewPoints(counts.ByRecoveryPoint) {
		o.Points[p] = counts.ByRecoveryPoint[p]
	}
	o.InFlight, o.Stale, o.Released, o.Finished, o.NeedsAttention =
		counts.InFlight, counts.Stale, counts.Released, counts.Finished, counts.NeedsAttention
	byStatus, err := rides.CountByStatus(ctx, c.pool)
	if err != nil {
		return nil, err
	}
	for _, s := range rides.Statuses {
		o.Rides[string(s)] = byStatus[s]
	}
	recent, err := rides.CountSince(ctx, c.pool, o.At.Add(-ratePeriod))
	if err != nil {
		return nil, err
	}
	o.RidesPerSecond = float64(recent) / ratePeriod.Seconds()
	if o.Staged, err = jobs.Waiting(ctx, c.pool); err != nil {
		return nil, err
	}
	// River's own count, through its driver.
	jobs, err := riverpgxv5.New(c.pool).GetExecutor().JobCountByAllStates(ctx, &riverdriver.JobCountByAllStatesParams{})
	if err != nil {
		return nil, fmt.Errorf("count river jobs: %w", err)
	}
	for _, s := range rivertype.JobStates() {
		o.Jobs[string(s)] = jobs[s]
	}
	run, err := reconcile.Latest(ctx, c.pool)
	if err != nil {
		return nil, err
	}
	o.Reconciled = "never"
	if run != nil {
		o.Reconciled = run.RanAt.UTC().Format(whenLayout)
		o.Findings = len(run.Discrepancies)
	}
	if o.Commits, err = c.commits.line(ctx, c.pool); err != nil {
		return nil, err
	}
	return o, nil
}

// commitsCheck is the overview's line on who confirms commits. The check
// writes a probe commit, and may wait up to db.CommitProbeTimeout for a
// missing standby: every open page shares one check per eventInterval
// instead of making its own each second.
type commitsCheck struct {
	mu   sync.Mutex
	at   time.Time
	said string
}

func (cc *commitsCheck) line(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if !cc.at.IsZero() && time.Since(cc.at) < eventInterval {
		return cc.said, nil
	}
	d, err := db.CheckDurability(ctx, pool, db.CommitProbeTimeout)
	var wait *db.CommitsWaitError
	switch {
	case errors.As(err, &wait):
		cc.said = "held: the primary waits for a synchronous standby (" + wait.Standbys + ") that is not confirming them"
	case err != nil:
		return "", err
	default:
		cc.said = d.String()
	}
	cc.at = time.Now()
	return cc.said, nil
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, s *session) {
	o, err := c.snapshot(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, "overview", s, map[string]any{
		"O":        o,
		"Points":   overviewPoints(o.Points),
		"Statuses": rides.Statuses,
		"States":   rivertype.JobStates(),
	})
}

// eventInterval is how often /events sends the overview.
const eventInterval = time.Second

// events streams the overview as server-sent events, one every
// eventInterval, until the browser goes away or the session ends: a
// page left open after its operator logged out, or was disabled, stops
// showing anything new.
func (c *Console) events(w http.ResponseWriter, r *http.Request, _ *session) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "Streaming unsupported.", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	rc := http.NewResponseController(w)
	ticker := time.NewTicker(eventInterval)
	defer ticker.Stop()
	for {
		o, err := c.snapshot(r.Context())
		if err != nil {
			if r.Context().Err() == nil {
				c.logger.ErrorContext(r.Context(), "Console overview failed", slog.Any("error", err))
			}
			return
		}
		data, err := json.Marshal(o)
		if err != nil {
			return
		}
		// Each event has its own write deadline: the server's would
		// end the stream.
		_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprintf(w, "event: overview\ndata: %s\n\n", data); err != nil {
			return
		}
		flusher.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-ticker.C:
		}
		s, err := c.sessionOf(r)
		if err != nil && r.Context().Err() == nil {
			c.logger.ErrorContext(r.Context(), "Console session check failed", slog.Any("error", err))
		}
		if s == nil {
			return
		}
	}
}

// search finds requests by client key, key id, ride id, charge id or user
// email, and goes straight to the story when there is one.
func (c *Console) search(w http.ResponseWriter, r *http.Request, s *session) {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	// Postgres refuses text that is not UTF-8 or holds a NUL, which
	// nothing the search finds does either.
	if !utf8.ValidString(q) || strings.ContainsRune(q, 0) {
		c.renderStatus(w, r, http.StatusBadRequest, "search", s, map[string]any{"Note": "Refused: a search (q) must be valid UTF-8 without a NUL character."})
		return
	}
	// Nothing the search finds has a longer name than a client key, and
	// a longer query would only make Postgres compare it.
	if n := utf8.RuneCountInString(q); n > rides.MaxKeyLength {
		c.renderStatus(w, r, http.StatusBadRequest, "search", s, map[string]any{
			"Note": fmt.Sprintf("Refused: a search (q) has at most %d characters, as the longest client key; this one has %d.", rides.MaxKeyLength, n),
		})
		return
	}
	keys, note, err := c.find(r.Context(), q)
	if err != nil {
		c.fail(w, r, fmt.Errorf("search %q: %w", q, err))
		return
	}
	if len(keys) == 1 && note == "" {
		http.Redirect(w, r, "/keys/"+strconv.FormatInt(keys[0].ID, 10), http.StatusSeeOther)
		return
	}
	c.render(w, r, "search", s, map[string]any{"Q": q, "Keys": keys, "Note": note})
}

// find returns the keys q names, and a note when q names a ride whose key
// is gone. That nothing matches is an answer; any other error of a
// look-up is returned, not taken for one.
func (c *Console) find(ctx context.Context, q string) (keys []*idem.Key, note string, err error) {
	// rideKey adds the key of the ride a look-up returned.
	rideKey := func(ride *rides.Ride, err error) error {
		switch {
		case errors.Is(err, rides.ErrNotFound):
			return nil
		case err != nil:
			return err
		}
		reaped := fmt.Sprintf("Ride %d's key was reaped; see Abandoned requests.", ride.ID)
		if ride.IdempotencyKeyID == nil {
			note = reaped
			return nil
		}
		if slices.ContainsFunc(keys, func(found *idem.Key) bool { return found.ID == *ride.IdempotencyKeyID }) {
			return nil // key 7 may well be the key of ride 7, found already
		}
		k, err := c.keys.KeyByID(ctx, *ride.IdempotencyKeyID)
		switch {
		case errors.Is(err, idem.ErrKeyNotFound):
			note = reaped
		case err != nil:
			return err
		default:
			keys = append(keys, k)
		}
		return nil
	}
	switch id, parseErr := strconv.ParseInt(strings.TrimPrefix(q, "#"), 10, 64); {
	case q == "":
	case parseErr == nil:
		k, err := c.keys.KeyByID(ctx, id)
		switch {
		case errors.Is(err, idem.ErrKeyNotFound):
		case err != nil:
			return nil, "", err
		default:
			keys = append(keys, k)
		}
		if err := rideKey(rides.RideByID(ctx, c.pool, id)); err != nil {
			return nil, "", err
		}
	case strings.HasPrefix(q, "ch_"):
		if err := rideKey(rides.RideByCharge(ctx, c.pool, q)); err != nil {
			return nil, "", err
		}
	case strings.Contains(q, "@"):
		u, err := user.ByEmail(ctx, c.pool, q)
		switch {
		case errors.Is(err, user.ErrNotFound):
		case err != nil:
			return nil, "", err
		default:
			if keys, err = c.keys.KeysOfUser(ctx, u.ID, 50); err != nil {
				return nil, "", err
			}
		}
	default:
		if keys, err = c.keys.FindKeys(ctx, q, 50); err != nil {
			return nil, "", err
		}
	}
	return keys, note, nil
}

// badKeyID is the answer to a key id in a path that cannot be one.
const badKeyID = "key id must be a positive whole number"

// keyIDOf is the key id in r's path, {id}: false when it is not a
// positive whole number that fits a bigint.
func keyIDOf(r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	return id, err == nil && id > 0
}

// story is one request's story.
func (c *Console) story(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	id, ok := keyIDOf(r)
	if !ok {
		c.renderStatus(w, r, http.StatusBadRequest, "search", s, map[string]any{"Note": "Refused: " + badKeyID + "."})
		return
	}
	key, err := c.keys.KeyByID(ctx, id)
	if errors.Is(err, idem.ErrKeyNotFound) {
		c.renderStatus(w, r, http.StatusNotFound, "search", s, map[string]any{"Q": r.PathValue("id"), "Note": "No such key: it never existed, or the reaper deleted it (see Abandoned requests)."})
		return
	}
	if err != nil {
		c.fail(w, r, err)
		return
	}
	data := map[string]any{"Key": key, "Message": c.flashOf(r, s, "message"), "Error": c.flashOf(r, s, "error")}
	if key.RequestPath == rides.Path {
		data["StripeKey"] = rides.StripeKey(key)
	}
	lab := c.labFor(key)
	data["Lab"] = lab
	// The page reloads itself while something may still change: the key
	// is unfinished, or the lab's clients are still at it.
	data["Refresh"] = key.RecoveryPoint != idem.Finished && key.AttentionReason == nil || lab != nil && !lab.Done
	if data["Trace"], err = c.traceLink(ctx, id); err != nil {
		c.fail(w, r, err)
		return
	}
	if data["Steps"], err = c.keys.Steps(ctx, id); err != nil {
		c.fail(w, r, err)
		return
	}
	u, err := user.ByID(ctx, c.pool, key.UserID)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	data["User"] = u
	// Stripe may be down; the page still tells the rest.
	if charges, err := c.rides.StripeCharges(ctx, u.StripeCustomerID, key); err != nil {
		data["StripeError"] = err.Error()
	} else {
		data["Charges"] = charges
	}
	ride, err := rides.RideByKey(ctx, c.pool, id)
	switch {
	case errors.Is(err, rides.ErrNotFound):
	case err != nil:
		c.fail(w, r, err)
		return
	default:
		data["Ride"] = ride
		if data["Audit"], err = audit.Of(ctx, c.pool, "ride", ride.ID); err != nil {
			c.fail(w, r, err)
			return
		}
		sent, found, err := jobs.ReceiptForRide(ctx, c.pool, ride.ID)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		if found {
			data["Receipt"] = sent
		}
	}
	c.render(w, r, "story", s, data)
}

// traceLink is the link to the trace of the request that claimed key id,
// in the viewer at c.traceURL; nil without a viewer, or when that request
// was not traced.
func (c *Console) traceLink(ctx context.Context, id int64) (*traceLink, error) {
	if c.traceURL == "" {
		return nil, nil
	}
	tp, err := c.keys.Traceparent(ctx, id)
	if err != nil || tp == nil {
		return nil, err
	}
	traceID := trace.TraceID(*tp)
	if traceID == "" {
		return nil, nil
	}
	return &traceLink{ID: traceID, URL: strings.ReplaceAll(c.traceURL, TraceIDPlaceholder, traceID)}, nil
}

// traceLink is a trace's id and its address in the trace viewer.
type traceLink struct{ ID, URL string }

// attentionItem is a key set aside, with what Stripe holds for it.
type attentionItem struct {
	Key         *idem.Key
	User        user.User
	Charges     []*payment.Charge
	StripeError string
}

func (c *Console) attention(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	keys, err := c.keys.SetAsideKeys(ctx, 100)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	items := make([]attentionItem, 0, len(keys))
	for _, k := range keys {
		it := attentionItem{Key: k}
		if it.User, err = user.ByID(ctx, c.pool, k.UserID); err != nil {
			c.fail(w, r, err)
			return
		}
		if it.Charges, err = c.rides.StripeCharges(ctx, it.User.StripeCustomerID, k); err != nil {
			it.StripeError = err.Error()
		}
		items = append(items, it)
	}
	c.render(w, r, "attention", s, map[string]any{
		"Items": items, "Message": c.flashOf(r, s, "message"), "Error": c.flashOf(r, s, "error"),
	})
}

// Settlement is one of the three settlements of package rides, under the
// name the console serves it at, POST /keys/{id}/<Name>, and the
// resolve command takes it by.
type Settlement struct {
	Name string
	// Run settles and says what it did, for the operator.
	Run func(ctx context.Context, svc *rides.Service, st rides.Settlement) (string, error)
}

var settlements = []Settlement{
	{"adopt", func(ctx context.Context, svc *rides.Service, st rides.Settlement) (string, error) {
		charge, err := svc.Adopt(ctx, st)
		return fmt.Sprintf("Adopted charge %s: the ride succeeded and its receipt is on its way.", charge), err
	}},
	{"release", func(ctx context.Context, svc *rides.Service, st rides.Settlement) (string, error) {
		return "Released: a retry or the completer will try the charge again.", svc.Release(ctx, st)
	}},
	{"close", func(ctx context.Context, svc *rides.Service, st rides.Settlement) (string, error) {
		return "Closed as failed: the ride failed and the request's answer is stored.", svc.CloseFailed(ctx, st)
	}},
}

// SettlementNamed is the settlement called name (adopt, release or
// close); false when there is none.
func SettlementNamed(name string) (Settlement, bool) {
	i := slices.IndexFunc(settlements, func(a Settlement) bool { return a.Name == name })
	if i < 0 {
		return Settlement{}, false
	}
	return settlements[i], true
}

// settle runs a settlement on a key, as the session's operator, and goes
// back to where the form was.
func (c *Console) settle(a Settlement) func(w http.ResponseWriter, r *http.Request, s *session) {
	return func(w http.ResponseWriter, r *http.Request, s *session) {
		id, ok := keyIDOf(r)
		if !ok {
			http.Error(w, "Refused: "+badKeyID+".", http.StatusBadRequest)
			return
		}
		ctx := r.Context()
		msg, err := a.Run(ctx, c.rides, rides.Settlement{KeyID: id, Operator: s.Operator, OriginIP: c.clientIP(r)})
		back := "/keys/" + strconv.FormatInt(id, 10)
		if r.PostFormValue("from") == "attention" {
			back = "/attention"
		}
		if err != nil {
			why, ok := refusal(err)
			if !ok {
				c.fail(w, r, fmt.Errorf("settle key %d (%s): %w", id, a.Name, err))
				return
			}
			c.logger.WarnContext(ctx, "Console settlement refused",
				slog.Int64("idempotency_key_id", id), slog.String("action", a.Name),
				slog.String("operator", s.Operator), slog.Any("error", err))
			http.Redirect(w, r, c.flash(back, s, "error", why), http.StatusSeeOther)
			return
		}
		c.logger.InfoContext(ctx, "Console settlement",
			slog.Int64("idempotency_key_id", id), slog.String("action", a.Name), slog.String("operator", s.Operator))
		http.Redirect(w, r, c.flash(back, s, "message", msg), http.StatusSeeOther)
	}
}

// refusal says why a settlement was refused, for the operator, when err
// is one of the refusals of rides and idem, each of which leaves the key
// as it was. Any other error is the console's to log, not the operator's
// to read: refusal reports false.
func refusal(err error) (string, bool) {
	switch {
	case errors.Is(err, idem.ErrInFlight):
		return "Refused: another request holds this key's lock right now. Try again once it lets go.", true
	case errors.Is(err, idem.ErrKeyFinished):
		return "Refused: this request has finished; there is nothing to settle.", true
	case errors.Is(err, idem.ErrKeyNotFound):
		return "Refused: no such key (reaped?).", true
	case errors.Is(err, rides.ErrNotSetAside):
		return "Refused: this request is not set aside for a person.", true
	case errors.Is(err, rides.ErrChargeFound):
		return "Refused: Stripe holds a charge for this request. Adopt it instead.", true
	case errors.Is(err, rides.ErrNoCharge):
		return "Refused: Stripe shows no charge for this request to adopt.", true
	case errors.Is(err, rides.ErrSeveralCharges):
		return "Refused: Stripe holds several charges for this request; see Reconciliation and refund one.", true
	case errors.Is(err, rides.ErrInvalidSettlement):
		// Its message says what: the operator's name or the origin IP.
		return "Refused: " + err.Error() + ".", true
	case errors.Is(err, payment.ErrUnavailable):
		// The settlement asks Stripe before it writes, and releases the
		// key untouched when Stripe cannot answer.
		return "Refused: Stripe could not be asked just now; nothing was changed.", true
	}
	return "", false
}

func urlQuery(s string) string { return template.URLQueryEscaper(s) }

// clientIP is where r came from, for the audit record and the login's
// throttle; the zero Addr when RemoteAddr holds no address (a Unix socket,
// behind which a proxy may stand for anyone), which a settlement refuses
// rather than record a made-up one. The resolve command, run on the host
// itself, records loopback: for it that is the truth.
//
// Behind a proxy the console trusts (Config.TrustProxy), every request
// comes from the proxy's address, which would make one operator's failed
// logins everyone's wait: the address is then the last of X-Forwarded-For,
// the one the proxy appended for the client it served. Those before it are
// whatever the client sent, and are not believed; without the header, the
// connection's address stands.
func (c *Console) clientIP(r *http.Request) netip.Addr {
	if c.trustProxy {
		if values := r.Header.Values("X-Forwarded-For"); len(values) > 0 {
			last := values[len(values)-1]
			last = last[strings.LastIndexByte(last, ',')+1:]
			if a, err := netip.ParseAddr(strings.TrimSpace(last)); err == nil {
				return a.Unmap()
			}
		}
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

func (c *Console) abandoned(w http.ResponseWriter, r *http.Request, s *session) {
	list, err := c.keys.AbandonedRequests(r.Context(), 200)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, "abandoned", s, map[string]any{"Abandoned": list})
}

func (c *Console) reconciliation(w http.ResponseWriter, r *http.Request, s *session) {
	run, err := reconcile.Latest(r.Context(), c.pool)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, "reconciliation", s, map[string]any{"Run": run})
}
