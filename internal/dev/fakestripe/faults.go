package fakestripe

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Faults are failures the server injects into POST /v1/charges, to put a
// client through the failures idempotency keys exist for. Counters count
// down as they fire. The zero value injects nothing.
type Faults struct {
	// FailNext fails the next n charge requests with FailStatus before they
	// execute: no charge is created and nothing is stored against their
	// idempotency keys, so a retry with the same key executes.
	FailNext int
	// FailStatus is the status FailNext answers with. Zero means 500.
	FailStatus int

	// Latency delays every charge request, after its idempotency key is
	// claimed and before it executes, as a slow charge would. A client that
	// gives up meanwhile leaves nothing behind, and a second request with the
	// same key meanwhile gets 409.
	Latency time.Duration

	// DropAfterCommitNext makes the next n charge requests that execute
	// store their result (usually a new charge) and then drop the
	// connection without answering: the ambiguous timeout, after which only
	// a retry with the same idempotency key can safely find out what
	// happened.
	DropAfterCommitNext int

	// DropAnswerNext drops the answer of the next n charge requests that
	// are served, whether executed now or replayed from their idempotency
	// key: the request takes effect (a charge is made and stored, or the
	// stored one is replayed), and the connection is then dropped without
	// the answer. DropAfterCommitNext counts only requests that execute,
	// so a client that resends with the same key at once, as stripe-go
	// does on a broken connection (its MaxNetworkRetries), gets the replay
	// and never sees the loss; DropAnswerNext loses those answers too, as
	// a network that stays down for a moment would. The idempotency
	// layer's own refusals (409 key in use, 400 key reused) are answered.
	DropAnswerNext int

	// StoreFailureNext makes the next n charge requests that carry an
	// Idempotency-Key fail with a 500 while executing, without creating a
	// charge. The 500 is stored against the key, so retries with that key
	// get it replayed, as they do at Stripe after an internal error.
	StoreFailureNext int
}

// failStatus is the status for FailNext, defaulted.
func (f Faults) failStatus() int {
	if f.FailStatus == 0 {
		return http.StatusInternalServerError
	}
	return f.FailStatus
}

// Faults returns the faults currently set.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// SetFaults replaces every fault setting with f. (POST /_fake/faults, by
// contrast, changes only the fields it names.)
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
}

// ClearFaults turns every fault off.
func (s *Server) ClearFaults() {
	s.SetFaults(Faults{})
}

// faultsJSON is Faults as GET /_fake/faults shows it.
type faultsJSON struct {
	FailNext            int   `json:"fail_next"`
	FailStatus          int   `json:"fail_status"`
	LatencyMS           int64 `json:"latency_ms"`
	DropAfterCommitNext int   `json:"drop_after_commit_next"`
	DropAnswerNext      int   `json:"drop_answer_next"`
	StoreFailureNext    int   `json:"store_failure_next"`
}

// faultsPatch is the body of POST /_fake/faults. Pointers tell a field left
// out, which keeps its setting, from one set to zero.
type faultsPatch struct {
	FailNext            *int   `json:"fail_next"`
	FailStatus          *int   `json:"fail_status"`
	LatencyMS           *int64 `json:"latency_ms"`
	DropAfterCommitNext *int   `json:"drop_after_commit_next"`
	DropAnswerNext      *int   `json:"drop_answer_next"`
	StoreFailureNext    *int   `json:"store_failure_next"`
}

func (p faultsPatch) validate() error {
	for name, n := range map[string]*int{
		"fail_next":              p.FailNext,
		"drop_after_commit_next": p.DropAfterCommitNext,
		"drop_answer_next":       p.DropAnswerNext,
		"store_failure_next":     p.StoreFailureNext,
	} {
		if n != nil && *n < 0 {
			return fmt.Errorf("%s must not be negative, got %d", name, *n)
		}
	}
	if p.LatencyMS != nil && *p.LatencyMS < 0 {
		return fmt.Errorf("latency_ms must not be negative, got %d", *p.LatencyMS)
	}
	// Zero restores the default; anything else must be an error status, or
	// the "failure" would look like a success to the client.
	if p.FailStatus != nil && *p.FailStatus != 0 && (*p.FailStatus < 400 || *p.FailStatus > 599) {
		return fmt.Errorf("fail_status must be an HTTP error status (400-599), got %d", *p.FailStatus)
	}
	return nil
}

func (p faultsPatch) apply(f *Faults) {
	if p.FailNext != nil {
		f.FailNext = *p.FailNext
	}
	if p.FailStatus != nil {
		f.FailStatus = *p.FailStatus
	}
	if p.LatencyMS != nil {
		f.Latency = time.Duration(*p.LatencyMS) * time.Millisecond
	}
	if p.DropAfterCommitNext != nil {
		f.DropAfterCommitNext = *p.DropAfterCommitNext
	}
	if p.DropAnswerNext != nil {
		f.DropAnswerNext = *p.DropAnswerNext
	}
	if p.StoreFailureNext != nil {
		f.StoreFailureNext = *p.StoreFailureNext
	}
}

func (s *Server) getFaults(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, faultsView(s.Faults()))
}

func (s *Server) patchFaults(w http.ResponseWriter, r *http.Request) {
	var patch faultsPatch
	dec := json.NewDecoder(r.Body)
	// A misspelt field would otherwise be ignored and the test would run
	// without the fault it meant to inject.
	dec.DisallowUnknownFields()
	if err := dec.Decode(&patch); err != nil {
		writeError(w, invalidRequest(http.StatusBadRequest, "", "", "Invalid faults: %v", err))
		return
	}
	if err := patch.validate(); err != nil {
		writeError(w, invalidRequest(http.StatusBadRequest, "", "", "Invalid faults: %v", err))
		return
	}

	s.mu.Lock()
	patch.apply(&s.faults)
	faults := s.faults
	s.mu.Unlock()

	writeJSON(w, http.StatusOK, faultsView(faults))
}

func (s *Server) deleteFaults(w http.ResponseWriter, r *http.Request) {
	s.ClearFaults()
	writeJSON(w, http.StatusOK, faultsView(Faults{}))
}

func faultsView(f Faults) faultsJSON {
	return faultsJSON{
		FailNext:            f.FailNext,
		FailStatus:          f.failStatus(),
		LatencyMS:           f.Latency.Milliseconds(),
		DropAfterCommitNext: f.DropAfterCommitNext,
		DropAnswerNext:      f.DropAnswerNext,
		StoreFailureNext:    f.StoreFailureNext,
	}
}

// chargeFrontDoor counts charge requests and fails them with FailNext. It
// runs before the idempotency layer: the failure it injects happens before
// anything executes, so there is nothing to store, and a retry with the same
// key must run. A request it lets through is marked as a charge, whose
// answer DropAnswerNext may drop (loseAnswer).
func (s *Server) chargeFrontDoor(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.stats.ChargeRequests++
		fail := s.faults.FailNext > 0
		if fail {
			s.faults.FailNext--
		}
		status := s.faults.failStatus()
		s.mu.Unlock()

		if fail {
			writeError(w, &apiError{
				status:  status,
				Type:    errorTypeAPI,
				Message: "An error occurred with our connection to Stripe. (injected fault: fail_next)",
			})
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), chargeRequest{}, true)))
	})
}

// chargeRequest marks the context of a request chargeFrontDoor let
// through.
type chargeRequest struct{}

// loseAnswer reports whether r's answer is to be dropped: r is a charge
// request and DropAnswerNext has a drop left, which this takes.
func (s *Server) loseAnswer(r *http.Request) bool {
	charge, _ := r.Context().Value(chargeRequest{}).(bool)
	return charge && s.takeFault(func(f *Faults) *int { return &f.DropAnswerNext })
}

// takeFault reports whether the counter points at a fault still to fire,
// counting it down if so.
func (s *Server) takeFault(counter func(*Faults) *int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := counter(&s.faults)
	if *n <= 0 {
		return false
	}
	*n--
	return true
}

// chargeLatency waits out the Latency fault, or until the client gives up.
func (s *Server) chargeLatency(ctx context.Context) error {
	latency := s.Faults().Latency
	if latency <= 0 {
		return nil
	}
	timer := time.NewTimer(latency)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting out injected latency: %w", context.Cause(ctx))
	}
}
