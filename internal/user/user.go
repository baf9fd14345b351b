// Package user owns the users table: who may call the API, and which
// Stripe customer pays for their rides. API tokens are stored only as
// SHA-256 hashes.
package user

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotFound means no user matched.
var ErrNotFound = errors.New("user not found")

// User is a caller of the API.
type User struct {
	ID               int64  `db:"id"`
	Email            string `db:"email"`
	StripeCustomerID string `db:"stripe_customer_id"`
}

// Querier is what this package needs from a pool, a connection or a
// transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// HashToken returns the stored form of an API token. Tokens are long
// random strings, so a plain SHA-256 is enough; a slow password hash would
// only slow every request down.
func HashToken(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// byTokenSQL looks up the user whose token hashes to $1.
const byTokenSQL = `SELECT id, email, stripe_customer_id FROM users WHERE api_token_hash = $1`

// ByToken returns the user the API token of tokenHash (HashToken)
// belongs to, or ErrNotFound. It takes the hash, which the api has made
// once for everything a request needs of its token.
func ByToken(ctx context.Context, q Querier, tokenHash []byte) (User, error) {
	return one(ctx, q, "by token", byTokenSQL, tokenHash)
}

// Lookup is a look-up of a user queued on a batch (QueueByToken): set
// once the batch is sent.
type Lookup struct {
	User  User
	Found bool
}

// QueueByToken queues on b the look-up ByToken makes, for a caller that
// sends it in one round trip with statements of its own: the api counts
// the token's requests in the same round trip (package ratelimit). Once b
// is sent, the Lookup holds the user, or Found is false.
func QueueByToken(b *pgx.Batch, tokenHash []byte) *Lookup {
	l := &Lookup{}
	b.Queue(byTokenSQL, tokenHash).Query(func(rows pgx.Rows) error {
		users, err := pgx.CollectRows(rows, pgx.RowToStructByName[User])
		if err != nil {
			return fmt.Errorf("read user by token: %w", err)
		}
		if len(users) == 1 {
			l.User, l.Found = users[0], true
		}
		return nil
	})
	return l
}

// ByID returns the user with id, or ErrNotFound.
func ByID(ctx context.Context, q Querier, id int64) (User, error) {
	return one(ctx, q, fmt.Sprintf("by id %d", id),
		`SELECT id, email, stripe_customer_id FROM users WHERE id = $1`, id)
}

// ByEmail returns the user with email, or ErrNotFound.
func ByEmail(ctx context.Context, q Querier, email string) (User, error) {
	return one(ctx, q, "by email "+email,
		`SELECT id, email, stripe_customer_id FROM users WHERE email = $1`, email)
}

// Upsert creates the user with email or updates its Stripe customer and
// token, and returns the user. Writing the same values again changes
// nothing: the update's WHERE skips the row, which then comes from the
// statement's snapshot instead of RETURNING (a second make dev, whose Stripe
// fake kept the customers, seeds exactly that).
func Upsert(ctx context.Context, q Querier, email, stripeCustomerID, token string) (User, error) {
	return one(ctx, q, "upsert "+email, `
		WITH upserted AS (
			INSERT INTO users (email, stripe_customer_id, api_token_hash)
			VALUES ($1, $2, $3)
			ON CONFLICT (email) DO UPDATE
			SET stripe_customer_id = excluded.stripe_customer_id,
			    api_token_hash     = excluded.api_token_hash
			WHERE (users.stripe_customer_id, users.api_token_hash)
			      IS DISTINCT FROM (excluded.stripe_customer_id, excluded.api_token_hash)
			RETURNING id, email, stripe_customer_id
		)
		SELECT id, email, stripe_customer_id FROM upserted
		UNION ALL
		SELECT id, email, stripe_customer_id FROM users
		WHERE email = $1 AND NOT EXISTS (SELECT FROM upserted)`,
		email, stripeCustomerID, HashToken(token))
}

func one(ctx context.Context, q Querier, what, sql string, args ...any) (User, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return User{}, fmt.Errorf("query user %s: %w", what, err)
	}
	u, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[User])
	if errors.Is(err, pgx.ErrNoRows) {
		return User{}, fmt.Errorf("user %s: %w", what, ErrNotFound)
	}
	if err != nil {
		return User{}, fmt.Errorf("read user %s: %w", what, err)
	}
	return u, nil
}
