package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ShouldRetryHeader is the server's word on whether a try that failed may
// be retried with the same key: "true" or "false", on every error answer.
// It wins over the client's own rules for the status.
const ShouldRetryHeader = "Rocket-Rides-Should-Retry"

// exchange is one request as every one of its tries sends it: the same
// method, path, key and bytes of body.
type exchange struct {
	method, path string
	key          string // "" for a GET
	body         []byte // nil for a GET
	contentType  string
}

// answer is what one try got.
type answer struct {
	status   int
	header   http.Header
	body     []byte
	replayed bool
}

// maxBody bounds how much of an answer is read: rides, pages of rides and
// problem documents are a few kilobytes at most.
const maxBody = 1 << 20

// Attempt is one try of a request, as Config.OnAttempt sees it.
type Attempt struct {
	// Method and Path are the request's; IdempotencyKey is its key, empty
	// for a GET.
	Method, Path, IdempotencyKey string
	// N counts the tries of the request, from 1.
	N int
	// Status is the answer's HTTP status, zero when there was none (Err).
	Status int
	// Code and RideID are the problem document's, for an error answer.
	Code   string
	RideID int64
	// Replayed is set when the answer was a stored one
	// (Idempotent-Replayed: true).
	Replayed bool
	// RetryAfter is the answer's Retry-After, zero when it had none.
	RetryAfter time.Duration
	// Header and Body are the answer's, as received.
	Header http.Header
	Body   []byte
	// Err is why no answer arrived: a network error, a timeout.
	Err     error
	Latency time.Duration
	// Final is set when the answer is final: a 2xx, or an error answer
	// no retry with the same key can change.
	Final bool
	// Retry says whether another try follows, after Wait. Neither Final
	// nor Retry: the client gives up (its tries, or its context, ran
	// out).
	Retry bool
	Wait  time.Duration
}

// String is the attempt as one logfmt line.
func (a Attempt) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "method=%s path=%s", a.Method, a.Path)
	if a.IdempotencyKey != "" {
		fmt.Fprintf(&b, " key=%s", a.IdempotencyKey)
	}
	fmt.Fprintf(&b, " attempt=%d", a.N)
	if a.Err != nil {
		fmt.Fprintf(&b, " error=%s", strconv.Quote(a.Err.Error()))
	} else {
		fmt.Fprintf(&b, " status=%d", a.Status)
	}
	if a.Code != "" {
		fmt.Fprintf(&b, " code=%s", a.Code)
	}
	if a.RideID != 0 {
		fmt.Fprintf(&b, " ride=%d", a.RideID)
	}
	if a.Replayed {
		b.WriteString(" replayed=true")
	}
	fmt.Fprintf(&b, " latency=%.1fms", float64(a.Latency)/float64(time.Millisecond))
	if a.Retry {
		fmt.Fprintf(&b, " retry_in=%s", a.Wait.Round(time.Millisecond))
	}
	return b.String()
}

// do sends ex until an answer is final, the tries run out, a wait would
// outlast ctx, or ctx ends; this is the client's one retry loop. It
// returns a 2xx answer, or the error of the last try.
func (c *Client) do(ctx context.Context, ex exchange) (answer, error) {
	for n := 1; ; n++ {
		start := time.Now()
		ans, err := c.try(ctx, ex)
		a := Attempt{Method: ex.method, Path: ex.path, IdempotencyKey: ex.key, N: n, Latency: time.Since(start), Err: err}
		var prob *Error
		retry := false
		switch {
		case err != nil:
			// No answer: the request may or may not have reached the
			// API, and only a retry with the same key can tell. The
			// caller's own context ending is no such failure.
			retry = ctx.Err() == nil
			err = fmt.Errorf("client: %s %s: %w", ex.method, ex.path, err)
		case ans.status >= 200 && ans.status < 300:
			a.Final = true
		default:
			prob = newError(ex, ans)
			retry, a.Final = !prob.Final, prob.Final
			err = prob
			a.Status, a.Code, a.RideID, a.RetryAfter = prob.Status, prob.Code, prob.RideID, prob.RetryAfter
		}
		if err == nil {
			a.Status = ans.status
		}
		a.Header, a.Body, a.Replayed = ans.header, ans.body, ans.replayed
		if retry && n < c.cfg.MaxAttempts {
			a.Wait, a.Retry = c.wait(ctx, n, a.RetryAfter)
		}
		if c.cfg.OnAttempt != nil {
			c.cfg.OnAttempt(a)
		}
		if !a.Retry {
			return ans, err
		}
		if c.cfg.Sleep(ctx, a.Wait) != nil {
			return ans, err
		}
	}
}

// wait is the wait before retry n, given the last answer's Retry-After,
// and whether to retry at all: not when the server asks for a longer wait
// than MaxDelay, nor when the wait would outlast ctx's deadline.
func (c *Client) wait(ctx context.Context, n int, retryAfter time.Duration) (time.Duration, bool) {
	if retryAfter > c.cfg.MaxDelay {
		return 0, false
	}
	ceiling := c.cfg.MaxDelay
	// BaseDelay << (n-1), without overflowing for a large n.
	if n < 32 {
		if d := c.cfg.BaseDelay << (n - 1); d > 0 && d < ceiling {
			ceiling = d
		}
	}
	// The server knows better than any backoff when it will be ready.
	d := max(c.cfg.Jitter(ceiling), retryAfter)
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= d {
		return 0, false
	}
	return d, true
}

// try sends ex once, bounded by AttemptTimeout, and reads its answer.
func (c *Client) try(ctx context.Context, ex exchange) (answer, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
	defer cancel()
	var body io.Reader
	if ex.body != nil {
		body = bytes.NewReader(ex.body)
	}
	req, err := http.NewRequestWithContext(ctx, ex.method, c.base+ex.path, body)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	if ex.key != "" {
		req.Header.Set("Idempotency-Key", ex.key)
	}
	if ex.contentType != "" {
		req.Header.Set("Content-Type", ex.contentType)
	}
	// net/http resends a request with an Idempotency-Key by itself, at
	// once, when a reused connection breaks under it. Without a way to
	// rewind the body it does not: every retry goes through this
	// package's loop, which waits before it and counts it.
	req.GetBody = nil
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		// The answer was lost on the way: as good as none. A retry
		// with the same key gets it again.
		return answer{}, fmt.Errorf("read the answer (status %d): %w", resp.StatusCode, err)
	}
	return answer{
		status: resp.StatusCode, header: resp.Header, body: raw,
		replayed: resp.Header.Get("Idempotent-Replayed") == "true",
	}, nil
}

// Error is a problem answer (RFC 9457, application/problem+json).
type Error struct {
	// Status is the HTTP status.
	Status int
	// Code is the problem's stable code (docs/openapi.yaml, ProblemCode);
	// branch on it, not on Title or Detail. Empty when the answer was no
	// problem document (a proxy's error page).
	Code   string
	Type   string
	Title  string
	Detail string
	// InvalidParams names each rejected parameter.
	InvalidParams []InvalidParam
	// RideID is the ride the request created before it failed, zero when
	// none: follow it with GetRide.
	RideID int64
	// Final is set when a retry with the same key cannot change the
	// answer. When it is not, the client gave up on an answer that may
	// still change: the tries or the context ran out. A ride it names is
	// pending and is settled by a later retry or by the server.
	Final bool
	// RetryAfter is the answer's Retry-After, zero when it had none.
	RetryAfter time.Duration
	// Replayed is set when the answer was a stored one.
	Replayed bool
	// RequestID is the server's id of the request, for support.
	RequestID string
	// IdempotencyKey is the request's key, empty for a GET.
	IdempotencyKey string
}

// InvalidParam is one rejected parameter.
type InvalidParam struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "client: %d", e.Status)
	if e.Code != "" {
		fmt.Fprintf(&b, " %s", e.Code)
	}
	if e.Detail != "" {
		fmt.Fprintf(&b, ": %s", e.Detail)
	}
	if e.RideID != 0 {
		fmt.Fprintf(&b, " (ride %d)", e.RideID)
	}
	return b.String()
}

// newError reads a non-2xx answer and decides whether it is final.
func newError(ex exchange, ans answer) *Error {
	var doc struct {
		Type          string         `json:"type"`
		Title         string         `json:"title"`
		Detail        string         `json:"detail"`
		Code          string         `json:"code"`
		InvalidParams []InvalidParam `json:"invalid_params"`
		RideID        int64          `json:"ride_id"`
	}
	isProblem := json.Unmarshal(ans.body, &doc) == nil && doc.Code != ""
	e := &Error{
		Status: ans.status, Code: doc.Code, Type: doc.Type, Title: doc.Title, Detail: doc.Detail,
		InvalidParams: doc.InvalidParams, RideID: doc.RideID,
		RetryAfter: parseRetryAfter(ans.header.Get("Retry-After"), time.Now()),
		Replayed:   ans.replayed, RequestID: ans.header.Get("Request-Id"), IdempotencyKey: ex.key,
	}
	e.Final = !shouldRetry(ans.status, ans.header.Get(ShouldRetryHeader), ans.replayed, isProblem)
	return e
}

// shouldRetry is the retry protocol's rule for an error answer: the
// server's hint when it sent one, else the status.
func shouldRetry(status int, hint string, replayed, isProblem bool) bool {
	switch strings.ToLower(strings.TrimSpace(hint)) {
	case "true":
		return true
	case "false":
		return false
	}
	switch {
	case replayed:
		// A stored answer is replayed byte for byte on every retry.
		return false
	case status == http.StatusRequestTimeout, status == http.StatusConflict, status == http.StatusTooManyRequests,
		status == http.StatusInternalServerError, status == http.StatusServiceUnavailable:
		return true
	case !isProblem && (status == http.StatusBadGateway || status == http.StatusGatewayTimeout):
		// Not the API's answer but a proxy's in front of it: the API
		// did not answer, as good as no answer at all.
		return true
	}
	return false
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an
// HTTP-date (RFC 9110, section 10.2.3). Anything else is no hint.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		return max(time.Duration(secs)*time.Second, 0)
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// fullJitter draws a wait uniformly from [0, ceiling].
func fullJitter(ceiling time.Duration) time.Duration {
	return time.Duration(rand.Int64N(int64(ceiling) + 1))
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Is reports whether err is, or wraps, an *Error with code.
func Is(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}
