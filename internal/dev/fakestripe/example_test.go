package fakestripe_test

import (
	"errors"
	"fmt"
	"net/http/httptest"

	"github.com/stripe/stripe-go/v76"

	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/dev/fakestripe/fakestripetest"
)

// A charge repeated with the same idempotency key is charged once: the
// second call gets the first call's response back.
func Example() {
	server, err := fakestripe.New(nil)
	if err != nil {
		panic(err)
	}
	httpServer := httptest.NewServer(server)
	defer httpServer.Close()
	sc := fakestripetest.NewClient(httpServer.URL, "sk_test_example")

	customer, err := sc.Customers.New(&stripe.CustomerParams{Source: stripe.String(fakestripe.TokenVisa)})
	if err != nil {
		panic(err)
	}

	params := &stripe.ChargeParams{
		Amount:   stripe.Int64(2000),
		Currency: stripe.String("usd"),
		Customer: stripe.String(customer.ID),
	}
	params.SetIdempotencyKey("ride-1")
	charge, err := sc.Charges.New(params)
	if err != nil {
		panic(err)
	}
	again, err := sc.Charges.New(params)
	if err != nil {
		panic(err)
	}

	fmt.Println(charge.Status, charge.Amount, charge.Currency)
	fmt.Println("same charge:", again.ID == charge.ID)
	fmt.Println("replayed:", again.LastResponse.Header.Get("Idempotent-Replayed"))
	fmt.Println("charges:", len(server.Charges()))
	// Output:
	// succeeded 2000 usd
	// same charge: true
	// replayed: true
	// charges: 1
}

// The ambiguous timeout: the charge is made but the answer is lost. Only a
// retry with the same idempotency key can safely find out what happened.
func ExampleServer_SetFaults() {
	server, err := fakestripe.New(nil)
	if err != nil {
		panic(err)
	}
	httpServer := httptest.NewServer(server)
	defer httpServer.Close()
	sc := fakestripetest.NewClient(httpServer.URL, "sk_test_example")

	customer, err := sc.Customers.New(&stripe.CustomerParams{Source: stripe.String(fakestripe.TokenVisa)})
	if err != nil {
		panic(err)
	}

	server.SetFaults(fakestripe.Faults{DropAfterCommitNext: 1})
	params := &stripe.ChargeParams{
		Amount:   stripe.Int64(2000),
		Currency: stripe.String("usd"),
		Customer: stripe.String(customer.ID),
	}
	params.SetIdempotencyKey("ride-1")
	_, err = sc.Charges.New(params)
	var stripeErr *stripe.Error
	fmt.Println("no answer, only a connection error:", err != nil && !errors.As(err, &stripeErr))
	fmt.Println("charges made:", len(server.Charges()))

	charge, err := sc.Charges.New(params)
	if err != nil {
		panic(err)
	}
	fmt.Println("retry finds it:", charge.ID == server.Charges()[0].ID)
	// Output:
	// no answer, only a connection error: true
	// charges made: 1
	// retry finds it: true
}
