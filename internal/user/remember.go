package user

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// A user remembered for a token. The api keeps, per process, which user
// each token it saw belonged to, and serves a request that makes an
// idempotency claim as that user without looking the token up first:
// the claim goes out behind a check that the user still holds the token
// (HoldsToken), in the same round trip, and the check's failure skips
// the claim. A remembered user therefore never outlives a revocation or
// a change of the user's row: the request that finds the change is
// served as if the token had never been remembered.

// holdsTokenSQL raises (RR004, api_token_check) unless user $1 still
// holds the token whose hash is $2, with the email $3 and Stripe customer
// $4 it was remembered with.
const holdsTokenSQL = `
	SELECT api_token_check(EXISTS (
		SELECT 1 FROM users
		WHERE id = $1 AND api_token_hash = $2 AND email = $3 AND stripe_customer_id = $4))`

// HoldsToken is the statement that checks a remembered user: it fails,
// with an error IsTokenChanged recognises, unless u still holds the token
// whose hash is tokenHash, and is still as remembered.
func HoldsToken(u User, tokenHash []byte) (sql string, args []any) {
	return holdsTokenSQL, []any{u.ID, tokenHash, u.Email, u.StripeCustomerID}
}

// IsTokenChanged reports whether err is HoldsToken's failure.
func IsTokenChanged(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "RR004"
}

type rememberedKey struct{}

type remembered struct {
	tokenHash      []byte
	reauthenticate func() (User, bool)
}

// NewRememberedContext is NewContext for a user remembered for the
// request's token (hashed tokenHash), not looked up: whatever acts for the
// user must check HoldsToken first, in the same transaction, or call
// Reauthenticate. reauthenticate forgets the user and authenticates the
// request afresh: it returns the user the token belongs to now, or false
// when it has answered the request itself (the token is no longer valid).
func NewRememberedContext(ctx context.Context, u User, tokenHash []byte, reauthenticate func() (User, bool)) context.Context {
	return context.WithValue(NewContext(ctx, u), rememberedKey{}, remembered{tokenHash, reauthenticate})
}

// Remembered returns the hash of the token the request's user was
// remembered for, or nil when the user was looked up.
func Remembered(ctx context.Context) []byte {
	r, _ := ctx.Value(rememberedKey{}).(remembered)
	return r.tokenHash
}

// Reauthenticate authenticates afresh a request whose user was remembered
// (see NewRememberedContext): the user its token belongs to now, or false
// when the request has been answered. For a user that was looked up it
// returns that user.
func Reauthenticate(ctx context.Context) (User, bool) {
	r, ok := ctx.Value(rememberedKey{}).(remembered)
	if !ok {
		return FromContext(ctx), true
	}
	return r.reauthenticate()
}
