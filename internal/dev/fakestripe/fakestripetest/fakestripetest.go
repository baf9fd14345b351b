// Package fakestripetest starts a fakestripe.Server for a test and points a
// stripe-go client, configured as package payment configures ours, at it.
// It is separate from fakestripe so that binaries serving the fake don't
// link package testing.
package fakestripetest

import (
	"net/http/httptest"
	"testing"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/payment"
)

// APIKey is a secret key the fake accepts, for tests that need one.
const APIKey = "sk_test_fakestripe"

// Start serves a new fakestripe.Server on a local port for the duration of
// the test and returns it with its base URL (http://127.0.0.1:port, no
// trailing slash).
func Start(tb testing.TB, config *fakestripe.Config) (*fakestripe.Server, string) {
	tb.Helper()

	server, err := fakestripe.New(config)
	if err != nil {
		tb.Fatal(err)
	}
	httpServer := httptest.NewServer(server)
	tb.Cleanup(httpServer.Close)
	return server, httpServer.URL
}

// NewClient returns a stripe-go client that talks to the fake at baseURL
// with apiKey. It is built by payment, as the Gateway's is, so that the
// fake is proven against the client it stands in for. It never retries: a
// test decides itself when to retry, and sees every failure the fake
// injects.
func NewClient(baseURL, apiKey string) *client.API {
	api, err := payment.NewStripeClient(&payment.Config{
		APIKey: apiKey, BaseURL: baseURL, MaxNetworkRetries: stripe.Int64(0),
	})
	if err != nil {
		panic("fakestripetest: " + err.Error())
	}
	return api
}
