package clientcheck

import (
	"fmt"
	"net/http"
	"slices"
	"time"
)

// Case is one of the contract's hard cases: what the harness answers each
// try, and what a client must do about it.
type Case struct {
	// Name is the case's path segment: its base URL is /<Name>.
	Name string
	// Title says what happens, Expect what the client must do.
	Title, Expect string

	// script answers try n (from 0); past its end, the last answer
	// again.
	script []answer
	// endless: the case never gives a final answer, and the client must
	// give up on its own.
	endless bool
}

// answer is what the harness answers one try.
type answer struct {
	status     int
	code       string
	retryAfter time.Duration
	rideID     bool // the problem names the ride
	replayed   bool
	// final: no retry with the same key changes it. Its
	// Rocket-Rides-Should-Retry says so.
	final bool
	// cut closes the connection without answering.
	cut    bool
	header http.Header
	// kill has the client killed, at this try (a death case).
	kill kill
	// charged: the try's request ran to its end before the client was
	// killed; a retry with its key gets its 201, replayed.
	charged bool
}

// kill is the moment a death case has the client killed, with SIGKILL
// to its whole process group, before it is started again.
type kill int

const (
	noKill kill = iota
	// killUnanswered holds the try unanswered and kills the client: the
	// answer is lost with the app.
	killUnanswered
	// killInWait answers the try and kills the client halfway through
	// the answer's Retry-After, while it waits to retry.
	killInWait
)

// madeRide reports whether the try answered a made a ride: a 201, an
// answer naming the ride, or a request the client died in.
func (a answer) madeRide() bool {
	return a.status == http.StatusCreated || a.rideID || a.kill != noKill
}

func (a answer) String() string {
	switch {
	case a.cut:
		return "no answer (the connection was cut)"
	case a.kill == killUnanswered:
		return "no answer (the client was killed)"
	case a.code != "":
		return fmt.Sprintf("%d %s", a.status, a.code)
	}
	return fmt.Sprintf("%d", a.status)
}

// Dies reports whether the case kills the client and starts it again.
func (c Case) Dies() bool {
	return slices.ContainsFunc(c.script, func(a answer) bool { return a.kill != noKill })
}

func (c Case) answer(n int) answer {
	return c.script[min(n, len(c.script)-1)]
}

// retryAfter is every case's Retry-After: short, so that a check takes
// seconds, and whole, as the header counts.
const retryAfter = time.Second

// The answers the cases are made of.
var (
	created         = answer{status: http.StatusCreated, final: true}
	createdReplayed = answer{status: http.StatusCreated, final: true, replayed: true}
)

// cases are the contract's hard cases, in the order of docs/clients.md.
var cases = []Case{
	{
		Name:    "unavailable",
		Title:   "503 with Retry-After, on every try: the payment provider stays down",
		Expect:  "retry with the same key and body, each try at least Retry-After after the last answer, and give up within the budget",
		script:  []answer{{status: http.StatusServiceUnavailable, code: "payment_unavailable", retryAfter: retryAfter, rideID: true}},
		endless: true,
	},
	{
		Name:   "in-flight",
		Title:  "409 while a twin is in flight, twice; then the twin's 201, replayed",
		Expect: "retry after Retry-After with the same key and body until the 201, then stop",
		script: []answer{
			{status: http.StatusConflict, code: "request_in_progress", retryAfter: retryAfter},
			{status: http.StatusConflict, code: "request_in_progress", retryAfter: retryAfter},
			createdReplayed,
		},
	},
	{
		Name:   "connection-cut",
		Title:  "the connection is cut after the ride was created; then the stored 201",
		Expect: "retry a request that got no answer, with the same key and body, until the 201",
		script: []answer{{cut: true}, createdReplayed},
	},
	{
		Name:   "after-charge",
		Title:  "500 after the charge, three times, without Retry-After; then 201",
		Expect: "back off (full jitter) and retry with the same key and body until the 201",
		script: []answer{
			{status: http.StatusInternalServerError, code: "internal_error", rideID: true},
			{status: http.StatusInternalServerError, code: "internal_error", rideID: true},
			{status: http.StatusInternalServerError, code: "internal_error", rideID: true},
			created,
		},
	},
	{
		Name:   "declined",
		Title:  "402 card_declined: stored, final",
		Expect: "stop: never retry a 402",
		script: []answer{
			{status: http.StatusPaymentRequired, code: "card_declined", rideID: true, final: true},
			{status: http.StatusPaymentRequired, code: "card_declined", rideID: true, final: true, replayed: true},
		},
	},
	{
		Name:   "key-reused",
		Title:  "422 idempotency_key_reused: the key named another request",
		Expect: "stop: the request needs a new key, which is the caller's decision",
		script: []answer{{status: http.StatusUnprocessableEntity, code: "idempotency_key_reused", final: true}},
	},
	{
		Name:   "rate-limited",
		Title:  "429 from a rate limit, with Retry-After; then 201",
		Expect: "wait at least Retry-After, retry with the same key and body, and stop on the 201",
		script: []answer{
			{status: http.StatusTooManyRequests, code: "rate_limited", retryAfter: retryAfter, header: http.Header{
				"Ratelimit-Policy": {`"token";q=600;w=60`}, "Ratelimit": {`"token";r=0;t=1`},
			}},
			created,
		},
	},
	{
		Name:   "server-says-final",
		Title:  "500 with Rocket-Rides-Should-Retry: false",
		Expect: "stop: the server's hint wins over the status",
		script: []answer{{status: http.StatusInternalServerError, code: "internal_error", rideID: true, final: true}},
	},
	// The app's death: each case kills the client and starts it again
	// with the same journal, which it must resume before anything else.
	{
		Name:   "killed-before-answer",
		Title:  "the app is killed once its first try has arrived, before the answer; then 201",
		Expect: "restarted, resume the ride from the journal with the same key and body, and stop on the 201",
		script: []answer{{kill: killUnanswered}, created},
	},
	{
		Name:   "killed-after-charge",
		Title:  "the app is killed after the charge, its 201 lost; then the stored 201, replayed",
		Expect: "restarted, resume the ride with the same key and body, which gets the stored 201: one ride, charged once",
		script: []answer{{kill: killUnanswered, charged: true}, created},
	},
	{
		Name:   "killed-in-backoff",
		Title:  "503 with Retry-After, and the app is killed while it waits; then 201",
		Expect: "restarted, resume the ride with the same key and body, and stop on the 201",
		script: []answer{
			{status: http.StatusServiceUnavailable, code: "payment_unavailable", retryAfter: retryAfter, rideID: true, kill: killInWait},
			created,
		},
	},
}

func caseNamed(name string) *Case {
	for i := range cases {
		if cases[i].Name == name {
			return &cases[i]
		}
	}
	return nil
}
