// Package logctx carries the identity of a unit of work, such as a
// request, in its context and adds it to every log line written with that
// context. A request's line about a failed Stripe call then names the
// request, the user and the idempotency key without each call site
// passing them, and the request log line written last sees everything
// that was learnt while the request ran.
//
// The attributes live in a small mutable set that the outermost layer puts
// into the context (New); inner layers add to it (Set) as they learn more:
// the API's request log middleware the request id, authentication the
// user id, the idempotency-key store the key id and recovery point.
// Without a set in the context, Set does nothing, so code shared with
// processes that do not use one (the completer) need not care.
package logctx

import (
	"context"
	"log/slog"
	"sync"
)

// The attribute keys set by the API. Every process uses the same names,
// so one query finds a request's lines wherever they were written.
const (
	RequestID        = "request_id"
	UserID           = "user_id"
	IdempotencyKeyID = "idempotency_key_id"
	RecoveryPoint    = "recovery_point"
)

type contextKey struct{}

// set is the mutable attribute set shared by everything holding the
// context. A mutex, because nothing stops a handler from logging on two
// goroutines.
type set struct {
	mu    sync.Mutex
	attrs []slog.Attr
}

// New returns ctx carrying a fresh attribute set holding attrs.
func New(ctx context.Context, attrs ...slog.Attr) context.Context {
	s := &set{attrs: make([]slog.Attr, 0, 4)}
	s.put(attrs)
	return context.WithValue(ctx, contextKey{}, s)
}

// Set adds attrs to the set carried by ctx, replacing attributes with the
// same key. Without a set it does nothing.
func Set(ctx context.Context, attrs ...slog.Attr) {
	if s, ok := ctx.Value(contextKey{}).(*set); ok {
		s.mu.Lock()
		s.put(attrs)
		s.mu.Unlock()
	}
}

func (s *set) put(attrs []slog.Attr) {
next:
	for _, a := range attrs {
		for i := range s.attrs {
			if s.attrs[i].Key == a.Key {
				s.attrs[i] = a
				continue next
			}
		}
		s.attrs = append(s.attrs, a)
	}
}

// Handler adds the attributes carried by a record's context to the
// record, then hands it to the wrapped handler. An attribute the log call
// passes itself wins: the context's is left out rather than repeated,
// which would make a JSON line carry the same key twice.
type Handler struct {
	inner slog.Handler
}

// NewHandler wraps h.
func NewHandler(h slog.Handler) *Handler { return &Handler{inner: h} }

// Enabled reports whether the wrapped handler handles level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.inner.Enabled(ctx, level)
}

// Handle adds ctx's attributes to r and passes it on.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if ctx == nil {
		return h.inner.Handle(ctx, r)
	}
	s, ok := ctx.Value(contextKey{}).(*set)
	if !ok {
		return h.inner.Handle(ctx, r)
	}
	s.mu.Lock()
	for _, a := range s.attrs {
		if !hasAttr(&r, a.Key) {
			r.AddAttrs(a)
		}
	}
	s.mu.Unlock()
	return h.inner.Handle(ctx, r)
}

// hasAttr reports whether r has a top-level attribute named key. It takes
// a pointer: the record is large, and this runs once per context
// attribute on every line.
func hasAttr(r *slog.Record, key string) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		found = a.Key == key
		return !found
	})
	return found
}

// WithAttrs returns a Handler wrapping h's handler with attrs.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{inner: h.inner.WithAttrs(attrs)}
}

// WithGroup returns a Handler wrapping h's handler with the group name.
// The context's attributes then land in that group too.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{inner: h.inner.WithGroup(name)}
}
