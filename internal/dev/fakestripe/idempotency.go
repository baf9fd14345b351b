package fakestripe

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// maxIdempotencyKeyLength is Stripe's limit; stripe-go refuses longer keys
// before sending them.
const maxIdempotencyKeyLength = 255

// sweepInterval bounds how often expired keys are swept, so that a long run
// with many keys neither grows without bound nor pays for a full sweep on
// every request.
const sweepInterval = time.Minute

// idempotencyScope identifies an idempotency key. Stripe scopes keys to the
// API key that sent them, so two clients can't collide on, or replay, each
// other's keys.
type idempotencyScope struct {
	apiKey string
	key    string
}

// idempotencyRecord is what the server remembers about a key: the request it
// was first used for and, once that request finished executing, its result.
type idempotencyRecord struct {
	method    string
	path      string
	params    url.Values
	firstUsed time.Time

	// finished is false while the first request is still executing; a
	// second request meanwhile gets 409 rather than running twice.
	finished bool
	result   storedResult
}

// storedResult is a response exactly as it was first sent, replayed byte for
// byte.
type storedResult struct {
	status    int
	body      []byte
	requestID string
}

// response is what a POST handler produced, before it is sent and, when the
// request carries an Idempotency-Key, stored against the key.
type response struct {
	status int
	body   []byte

	// executed reports whether the request began executing. Like Stripe, the
	// server stores only results of requests that began executing: one
	// rejected for its parameters, or failed by a fault injected in front of
	// it, changed nothing, so a corrected retry with the same key must run.
	executed bool

	// drop ends the exchange without answering once the result is stored
	// (DropAfterCommitNext, DropAnswerNext): the ambiguous timeout, where
	// the client can't know what happened.
	drop bool
}

// succeeded is an executed request's result.
func succeeded(status int, v any) response {
	return response{status: status, body: mustMarshal(v), executed: true}
}

// failedExecuting is an error that happened while executing, such as a
// declined card: stored and replayed like a success.
func failedExecuting(err *apiError) response {
	return response{status: err.status, body: mustMarshal(err.envelope()), executed: true}
}

// rejected is an error that stopped the request before it executed: not
// stored.
func rejected(err *apiError) response {
	return response{status: err.status, body: mustMarshal(err.envelope())}
}

// postHandler executes a POST whose form has been parsed into r.Form.
type postHandler func(r *http.Request) response

// idempotent wraps a POST handler with Stripe's idempotency keys: the first
// result that began executing is stored under the request's Idempotency-Key
// and replayed to every later request with the same key and parameters,
// until the key's retention runs out.
func (s *Server) idempotent(h postHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			writeError(w, invalidRequest(http.StatusBadRequest, "", "", "Invalid request body: %v", err))
			return
		}

		key := strings.TrimSpace(r.Header.Get("Idempotency-Key"))
		if key == "" {
			resp := s.execute(h, r)
			resp.drop = resp.drop || s.loseAnswer(r)
			s.respond(w, resp)
			return
		}
		if len(key) > maxIdempotencyKeyLength {
			writeError(w, invalidRequest(http.StatusBadRequest, "", "",
				"Keys for idempotent requests can be up to %d characters long.", maxIdempotencyKeyLength))
			return
		}

		requestID := newID("req_", 14)
		w.Header().Set("Request-Id", requestID)
		w.Header().Set("Idempotency-Key", key)

		scope := idempotencyScope{apiKey: apiKey(r), key: key}
		replay, apiErr := s.claimKey(scope, r, requestID)
		if apiErr != nil {
			writeError(w, apiErr)
			return
		}
		if replay != nil {
			w.Header().Set("Idempotent-Replayed", "true")
			w.Header().Set("Original-Request", replay.requestID)
			s.respond(w, response{status: replay.status, body: replay.body, drop: s.loseAnswer(r)})
			return
		}

		resp := s.execute(h, r)
		s.settleKey(scope, resp, requestID)
		resp.drop = resp.drop || s.loseAnswer(r)
		s.respond(w, resp)
	}
}

// claimKey looks the key up. It returns the stored result to replay, or an
// error when the key can't be used for this request, or neither, in which
// case the key is now held by this request until settleKey.
func (s *Server) claimKey(scope idempotencyScope, r *http.Request, requestID string) (*storedResult, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()

	now := s.nowLocked()
	s.sweepExpiredKeysLocked(now)

	if record, ok := s.idempotency[scope]; ok && s.expired(record, now) {
		delete(s.idempotency, scope)
	}

	record, ok := s.idempotency[scope]
	if !ok {
		s.idempotency[scope] = &idempotencyRecord{
			method:    r.Method,
			path:      r.URL.Path,
			params:    r.Form,
			firstUsed: now,
		}
		return nil, nil
	}

	switch {
	case !record.finished:
		return nil, &apiError{
			status: http.StatusConflict,
			Type:   errorTypeIdempotency,
			Code:   "idempotency_key_in_use",
			Message: fmt.Sprintf("There is currently another in-progress request using this Idempotency-Key "+
				"(that probably means you submitted twice, and the other request is still going through): '%s'. "+
				"Please try again later.", scope.key),
		}
	case record.method != r.Method || record.path != r.URL.Path:
		s.stats.IdempotencyMismatches++
		return nil, &apiError{
			status: http.StatusBadRequest,
			Type:   errorTypeIdempotency,
			Message: fmt.Sprintf("Keys for idempotent requests can only be used for the same endpoint they were "+
				"first used for ('%s %s' vs '%s %s'). Try using a key other than '%s' if you meant to execute a "+
				"different request.", record.method, record.path, r.Method, r.URL.Path, scope.key),
		}
	case !sameParams(record.params, r.Form):
		s.stats.IdempotencyMismatches++
		return nil, &apiError{
			status: http.StatusBadRequest,
			Type:   errorTypeIdempotency,
			Message: fmt.Sprintf("Keys for idempotent requests can only be used with the same parameters they "+
				"were first used with. Try using a key other than '%s' if you meant to execute a different "+
				"request.", scope.key),
		}
	}

	s.stats.Replays++
	result := record.result
	return &result, nil
}

// settleKey stores an executed result against the key claimKey gave this
// request, or releases the key if the request never began executing.
func (s *Server) settleKey(scope idempotencyScope, resp response, requestID string) {
	s.mu.Lock()
	defer s.mu.Unlock()

	if !resp.executed {
		delete(s.idempotency, scope)
		return
	}
	record := s.idempotency[scope]
	record.finished = true
	record.result = storedResult{status: resp.status, body: resp.body, requestID: requestID}
	s.recordLocked(keyEntry(scope, record))
}

func (s *Server) expired(record *idempotencyRecord, now time.Time) bool {
	// A key still executing is never forgotten: that would let a retry run
	// the request a second time alongside the first.
	return record.finished && !now.Before(record.firstUsed.Add(s.keyRetention))
}

func (s *Server) sweepExpiredKeysLocked(now time.Time) {
	if now.Sub(s.lastSweep) < sweepInterval {
		return
	}
	s.lastSweep = now
	for scope, record := range s.idempotency {
		if s.expired(record, now) {
			delete(s.idempotency, scope)
		}
	}
}

// execute runs a handler. A panic is an internal error that happened while
// executing, so, as at Stripe, it becomes a stored 500 instead of a key
// held forever by a request that will never finish.
func (s *Server) execute(h postHandler, r *http.Request) (resp response) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		if p == http.ErrAbortHandler {
			panic(p)
		}
		s.logger.ErrorContext(r.Context(), "Handler panicked", slog.String("path", r.URL.Path), slog.Any("panic", p))
		resp = failedExecuting(internalError("An unknown error occurred while processing your request."))
	}()
	return h(r)
}

// respond sends a handler's response, or drops the connection when the
// response asks for it.
func (s *Server) respond(w http.ResponseWriter, resp response) {
	if !resp.drop {
		writeBody(w, resp.status, resp.body)
		return
	}
	s.mu.Lock()
	s.stats.DroppedAnswers++
	s.mu.Unlock()
	if err := dropConnection(w); err != nil {
		s.logger.Error("Drop connection", slog.Any("error", err))
		// Without a connection to hijack (HTTP/2), abort the response, which
		// resets the stream: still no answer for the client.
		panic(http.ErrAbortHandler)
	}
}

// dropConnection hijacks the connection and closes it without a response.
//
// It writes the start of a status line first. On a kept-alive connection a
// clean close before the first byte looks to Go's HTTP transport like an
// idle connection the server timed out, and because the request carries an
// Idempotency-Key the transport considers it safe to resend it, silently, on
// a new connection: the client would receive the replayed charge and never
// see the ambiguous failure this fault exists to produce. A truncated
// response is an error no transport retries.
func dropConnection(w http.ResponseWriter) error {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return fmt.Errorf("hijack: %w", err)
	}
	_, writeErr := buf.WriteString("HTTP/1.1 ")
	if writeErr == nil {
		writeErr = buf.Flush()
	}
	return errors.Join(writeErr, conn.Close())
}

// sameParams compares two parsed forms, ignoring the order of keys and of
// repeated values: an encoder is free to reorder them.
func sameParams(a, b url.Values) bool {
	if len(a) != len(b) {
		return false
	}
	for key, av := range a {
		bv, ok := b[key]
		if !ok || !slices.Equal(slices.Sorted(slices.Values(av)), slices.Sorted(slices.Values(bv))) {
			return false
		}
	}
	return true
}
