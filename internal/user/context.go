package user

import "context"

type contextKey struct{}

// NewContext returns ctx carrying the authenticated user u.
func NewContext(ctx context.Context, u User) context.Context {
	return context.WithValue(ctx, contextKey{}, u)
}

// FromContext returns the authenticated user of a request. Handlers behind
// the authentication middleware can rely on it being there; a missing user
// is a wiring bug and panics rather than serving someone as user 0.
func FromContext(ctx context.Context) User {
	u, ok := ctx.Value(contextKey{}).(User)
	if !ok {
		panic("user: no authenticated user in context; is the route behind the auth middleware?")
	}
	return u
}
