// Command seed creates the demo users and their Stripe customers: one whose
// card works and one whose card is always declined. Running it again
// changes nothing. It prints "<email> <token>" per user.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/rocketrides/rocketrides/internal/payment"
	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/db"
	"github.com/rocketrides/rocketrides/internal/user"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "seed:", err)
		os.Exit(1)
	}
}

func run() error {
	var env config.Env
	token := flag.String("token", env.String("SEED_USER_TOKEN", user.DemoToken),
		"API token of user@example.com (env SEED_USER_TOKEN)")
	badToken := flag.String("bad-source-token", env.String("SEED_BAD_SOURCE_TOKEN", user.DemoBadSourceToken),
		"API token of user-bad-source@example.com (env SEED_BAD_SOURCE_TOKEN)")
	wait := flag.Duration("wait", 0, "keep retrying this long while Stripe (or the local fake) is not up yet")
	flag.Parse()

	if _, err := config.Logger(&env, "seed", os.Stderr); err != nil {
		return err
	}
	url := env.Required("DATABASE_URL")
	stripe := payment.ConfigFromEnv(&env)
	if err := env.Err(); err != nil {
		return err
	}
	ctx := context.Background()
	pool, err := db.Open(ctx, url, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	gateway, err := payment.New(&stripe)
	if err != nil {
		return err
	}

	demo := []struct{ email, source, token string }{
		{"user@example.com", "tok_visa", *token},
		{"user-bad-source@example.com", "tok_chargeCustomerFail", *badToken},
	}
	deadline := time.Now().Add(*wait)
	for _, d := range demo {
		customerID, err := customerFor(ctx, pool, gateway, d.email, d.source)
		// In `make dev` the seed starts alongside the Stripe fake.
		for errors.Is(err, payment.ErrUnavailable) && time.Now().Before(deadline) {
			time.Sleep(250 * time.Millisecond)
			customerID, err = customerFor(ctx, pool, gateway, d.email, d.source)
		}
		if err != nil {
			return err
		}
		if _, err := user.Upsert(ctx, pool, d.email, customerID, d.token); err != nil {
			return err
		}
		fmt.Println(d.email, d.token)
	}
	return nil
}

// customerFor returns the user's Stripe customer, creating one only when
// the user has none that Stripe knows (the local fake forgets its
// customers when it restarts without FAKESTRIPE_STATE, or after make clean).
func customerFor(ctx context.Context, q user.Querier, gateway *payment.Gateway, email, source string) (string, error) {
	u, err := user.ByEmail(ctx, q, email)
	switch {
	case err == nil:
		exists, err := gateway.CustomerExists(ctx, u.StripeCustomerID)
		if err != nil {
			return "", err
		}
		if exists {
			return u.StripeCustomerID, nil
		}
	case !errors.Is(err, user.ErrNotFound):
		return "", err
	}
	// The idempotency key keeps a seed that crashed after creating the
	// customer from creating a second one when it runs again.
	return gateway.CreateCustomer(ctx, email, source, "rocket-rides-seed-"+email+"-"+source)
}
