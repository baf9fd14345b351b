package problem

import (
	"strings"
	"sync/atomic"

	"github.com/rocketrides/rocketrides/internal/platform/config"
)

// CodeDoc documents one problem code: the statuses it comes with, what
// happened and what the client does next. Codes is the list docs/errors.md
// is written from (make docs), and the page every problem's type points at.
type CodeDoc struct {
	Code     string
	Statuses []int
	Meaning  string
}

// Codes are every code the API answers with, in the order docs/errors.md
// lists them: the request's own faults, then the key's, the payment's,
// the service's. A test fails when a problem.New in the code uses a code
// missing here, or when one here is used nowhere.
var Codes = []CodeDoc{
	{"unauthorized", []int{401}, "No bearer token, a token that is not valid, or the Authorization header sent twice. Send `Authorization: Bearer <token>` once."},
	{"idempotency_key_missing", []int{400}, "The `Idempotency-Key` header is missing or empty. Send a new random key (a UUID) with every new ride, and the same key with its retries."},
	{"idempotency_key_invalid", []int{400}, "The key is too short or too long, not printable ASCII, badly quoted, or sent twice. `detail` says which."},
	{"malformed_body", []int{400}, "The body could not be decoded. For JSON, `detail` gives the line, column and byte where it went wrong, and why."},
	{"ambiguous_framing", []int{400}, "The request has both `Content-Length` and `Transfer-Encoding`. It is refused before any endpoint, and the connection closed."},
	{"invalid_query", []int{400}, "The query is malformed, or a query parameter is invalid, empty, repeated or unknown; `invalid_params` names it."},
	{"request_timeout", []int{408}, "The body stopped arriving. Nothing was done: retry with the same key."},
	{"body_too_large", []int{413}, "The body is over 64 KiB."},
	{"unsupported_media_type", []int{415}, "The body is neither JSON nor a form: send `Content-Type: application/json` or `application/x-www-form-urlencoded`."},
	{"unsupported_content_encoding", []int{415}, "The body has a `Content-Encoding` other than `identity`. Send it uncompressed."},
	{"invalid_params", []int{422}, "Parameters missing, not numbers, out of range, repeated or unknown; `invalid_params` names each. JSON sent as a form (curl -d without `Content-Type: application/json`) lands here, and `detail` says so."},
	{"idempotency_key_reused", []int{422}, "The key was first used for a different request (method, path or parameters). Use a new key for a new ride."},
	{"idempotency_key_expired", []int{410}, "The key outlived its lifetime, and its request is not run again. Follow `ride_id`, if there is one, with `GET /rides/{id}`; use a new key for a new ride."},
	{"request_in_progress", []int{409}, "Another request with this key is running. Retry shortly with the same key."},
	{"request_taken_over", []int{409}, "This request stalled and a retry took it over. Retry with the same key to get its result."},
	{"rate_limited", []int{429}, "A limit was reached. Nothing was done: retry with the same key after `Retry-After` seconds."},
	{"card_declined", []int{402}, "The card was declined. The answer is stored on the key: retries get it again. Use another card with a new key."},
	{"payment_rejected", []int{502}, "The payment provider refused the charge. Stored on the key, as a decline is."},
	{"payment_needs_review", []int{502}, "The charge's outcome is unknown, and the request is set aside for a person. You are not charged twice; contact support with the key."},
	{"payment_unavailable", []int{503}, "The payment provider could not be reached. Retry with the same key: you are charged at most once."},
	{"database_contention", []int{503}, "Concurrent work got in the way. Retry with the same key."},
	{"request_cancelled", []int{503}, "The request was cancelled on the way. Retry with the same key; it resumes where it stopped."},
	{"unavailable", []int{503}, "The API token could not be checked. Retry."},
	{"database_unavailable", []int{503}, "`/readyz` only: the database does not answer."},
	{"database_commits_waiting", []int{503}, "`/readyz` only: the primary holds every commit for a synchronous standby that is not confirming them."},
	{"ride_not_found", []int{404}, "No ride of yours has this id."},
	{"not_found", []int{404}, "No such endpoint."},
	{"method_not_allowed", []int{405}, "The endpoint does not take this method; the Allow header lists those it takes."},
	{"internal_error", []int{500}, "A fault on our side. Retry with the same key unless `Rocket-Rides-Should-Retry` says false (a ride that asked to fail with `raise_error=true`): the request resumes where it stopped."},
}

// DefaultTypeBase is where a problem's type points unless
// PROBLEM_TYPE_BASE says otherwise: a relative reference, resolved against
// the api's own URL, whose GET /errors serves docs/errors.md. It names no
// host the project does not run.
const DefaultTypeBase = "/errors"

// Variables are the settings of problems, read by every process that
// answers with them or stores them on a key (ReadTypeBase).
var Variables = config.Declare(
	config.Setting{Name: "PROBLEM_TYPE_BASE", Type: config.TypeString,
		Help: "the base of every problem's type, which is <base>#<code>: a URL or path where docs/errors.md is published (default /errors, the api's own copy)"},
)

// typeBase is the base of every problem's type (SetTypeBase).
var typeBase atomic.Pointer[string]

// ReadTypeBase reads PROBLEM_TYPE_BASE from env, refusing a value with a
// fragment or white space. A process passes the result to SetTypeBase
// once env.Err has passed.
func ReadTypeBase(env *config.Env) string {
	base := env.String("PROBLEM_TYPE_BASE", DefaultTypeBase)
	if base == "" || strings.ContainsAny(base, "# \t\n") {
		env.Refuse("PROBLEM_TYPE_BASE", "must be a URL or a path without a fragment or spaces, such as "+DefaultTypeBase)
	}
	return base
}

// SetTypeBase sets the base of every problem's type: the type is
// base#code. A process sets it once, before it serves.
func SetTypeBase(base string) { typeBase.Store(&base) }

// Type is the type of the problems with code.
func Type(code string) string {
	base := DefaultTypeBase
	if b := typeBase.Load(); b != nil {
		base = *b
	}
	return base + "#" + code
}
