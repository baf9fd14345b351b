// Package problem renders errors as RFC 9457 problem details
// (application/problem+json), the one error format of the API. Each
// problem carries a stable machine-readable code next to the prose.
package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
	"unicode/utf8"
)

// ContentType is the media type of a problem document.
const ContentType = "application/problem+json"

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Code is stable across releases; clients branch on it, not on prose.
	Code string `json:"code"`
	// InvalidParams names every rejected request parameter.
	InvalidParams []InvalidParam `json:"invalid_params,omitempty"`
	// RetryAfter, when positive, is also sent as the Retry-After header.
	RetryAfter int `json:"-"`
	// Header holds further header fields sent with the problem, such as
	// a rate limit's RateLimit and RateLimit-Policy.
	Header http.Header `json:"-"`
	// Extensions are extension members (RFC 9457, section 3.2), such as
	// the id of a resource the problem is about, set with With. Their
	// names must not be those of the members above.
	Extensions map[string]any `json:"-"`
	// Final marks a problem that no retry with the same key can change
	// although its status says otherwise (ShouldRetry): its
	// ShouldRetryHeader says false.
	Final bool `json:"-"`
}

// ShouldRetryHeader tells the client, on every error answer, whether a
// retry with the same Idempotency-Key may get another answer: "true" or
// "false". It is modelled on Stripe's Stripe-Should-Retry, and clients
// prefer it to their own rules for the status (the client package does).
const ShouldRetryHeader = "Rocket-Rides-Should-Retry"

// ShouldRetry is the retry protocol of docs/openapi.yaml for an error
// answer with status: a 408 (the body stalled; nothing ran), a 409 (the
// key is in flight), a 429 (a limit; nothing ran), a 500 or a 503 (the
// request stopped where a retry resumes it) may still change. Every other
// status is final for its key: a 402 or 502 is stored and replayed, a
// 410 or another 4xx is about the request itself.
func ShouldRetry(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooManyRequests,
		http.StatusInternalServerError, http.StatusServiceUnavailable:
		return true
	}
	return false
}

// InvalidParam is one rejected request parameter.
type InvalidParam struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// New returns a problem with the status's standard title.
func New(status int, code, detail string) *Problem {
	return &Problem{
		Type:   Type(code),
		Title:  Title(status),
		Status: status,
		Detail: detail,
		Code:   code,
	}
}

// Title is the status's reason phrase as RFC 9110 gives it. net/http
// keeps RFC 7231's older phrases for a few statuses ("Request Entity Too
// Large", "Unprocessable Entity"); RFC 9110 renamed them.
func Title(status int) string {
	switch status {
	case http.StatusRequestEntityTooLarge:
		return "Content Too Large"
	case http.StatusRequestURITooLong:
		return "URI Too Long"
	case http.StatusRequestedRangeNotSatisfiable:
		return "Range Not Satisfiable"
	case http.StatusUnprocessableEntity:
		return "Unprocessable Content"
	}
	return http.StatusText(status)
}

// MaxClip is how many bytes of a client's string Clip keeps.
const MaxClip = 256

// Clip returns s, a string the client chose (a path, a parameter name, a
// header value), cut to at most MaxClip bytes on a character boundary and
// marked with "…" when cut. Everything echoed in a problem or written to
// a log passes through it: a client must not be able to make an answer or
// a log line as long as the request it sent.
func Clip(s string) string {
	if len(s) <= MaxClip {
		return s
	}
	// Back to the start of the character the cut would split; bytes that
	// start none (invalid UTF-8) are cut anywhere.
	cut := MaxClip
	for back := cut; back > MaxClip-utf8.UTFMax; back-- {
		if utf8.RuneStart(s[back]) {
			cut = back
			break
		}
	}
	return s[:cut] + "…"
}

// WithRetryAfter asks the client to wait seconds before retrying.
func (p *Problem) WithRetryAfter(seconds int) *Problem {
	p.RetryAfter = seconds
	return p
}

// With adds the extension member name, with value, to the problem.
func (p *Problem) With(name string, value any) *Problem {
	if p.Extensions == nil {
		p.Extensions = map[string]any{}
	}
	p.Extensions[name] = value
	return p
}

// JSON encodes the problem document.
func (p *Problem) JSON() []byte {
	b, err := json.Marshal(p)
	if err != nil {
		// Every field is a plain string, int or slice of them.
		panic("encode problem: " + err.Error())
	}
	if len(p.Extensions) == 0 {
		return b
	}
	ext, err := json.Marshal(p.Extensions)
	if err != nil {
		panic("encode problem extensions: " + err.Error())
	}
	// Both are JSON objects: the members of the second go inside the
	// first, in the order encoding/json gives a map's keys (sorted).
	return append(append(b[:len(b)-1], ','), ext[1:]...)
}

// Write sends the problem as the response.
func (p *Problem) Write(w http.ResponseWriter) {
	for name, values := range p.Header {
		w.Header()[name] = values
	}
	if p.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	w.Header().Set(ShouldRetryHeader, strconv.FormatBool(!p.Final && ShouldRetry(p.Status)))
	w.Header().Set("Content-Type", ContentType)
	w.WriteHeader(p.Status)
	_, _ = w.Write(p.JSON())
}
