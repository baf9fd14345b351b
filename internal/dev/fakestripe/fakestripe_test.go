package fakestripe_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/dev/fakestripe/fakestripetest"
)

const testAPIKey = "sk_test_123"

// fake is a server under test, reached over real HTTP, with a stripe-go
// client pointed at it.
type fake struct {
	server  *fakestripe.Server
	baseURL string
	client  *client.API
}

func startFake(t *testing.T, config *fakestripe.Config) *fake {
	t.Helper()
	server, baseURL := fakestripetest.Start(t, config)
	return &fake{server: server, baseURL: baseURL, client: fakestripetest.NewClient(baseURL, testAPIKey)}
}

// createCustomer creates a customer whose source is token.
func (f *fake) createCustomer(t *testing.T, email, token string) *stripe.Customer {
	t.Helper()
	customer, err := f.client.Customers.New(&stripe.CustomerParams{
		Email:  stripe.String(email),
		Source: stripe.String(token),
	})
	require.NoError(t, err)
	return customer
}

// chargeParams charges customerID amount cents under idempotencyKey; an
// empty key leaves stripe-go to generate one.
func chargeParams(customerID string, amount int64, idempotencyKey string) *stripe.ChargeParams {
	params := &stripe.ChargeParams{
		Amount:      stripe.Int64(amount),
		Currency:    stripe.String(string(stripe.CurrencyUSD)),
		Customer:    stripe.String(customerID),
		Description: stripe.String("Rocket ride"),
	}
	params.AddMetadata("ride_id", "42")
	if idempotencyKey != "" {
		params.SetIdempotencyKey(idempotencyKey)
	}
	return params
}

// rawResponse is a response read in full, for assertions on the wire
// format that stripe-go would hide.
type rawResponse struct {
	status int
	header http.Header
	body   []byte
}

// do sends a raw request. apiKey and idempotencyKey are left out when empty;
// a body makes it a form post.
func (f *fake) do(t *testing.T, method, path, apiKey, idempotencyKey, body string) rawResponse {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, f.baseURL+path, strings.NewReader(body))
	require.NoError(t, err)
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	return send(t, req)
}

func send(t *testing.T, req *http.Request) rawResponse {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return rawResponse{status: resp.StatusCode, header: resp.Header, body: body}
}

// stripeError is the error envelope as it travels.
type stripeError struct {
	Error struct {
		Type        string `json:"type"`
		Code        string `json:"code"`
		DeclineCode string `json:"decline_code"`
		Message     string `json:"message"`
		Param       string `json:"param"`
	} `json:"error"`
}

func decode[T any](t *testing.T, body []byte) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(body, &v), string(body))
	return v
}

// requireStripeError asserts that err is a Stripe API error with the given
// status, type and code, .
func requireStripeError(t *testing.T, err error, status int, typ stripe.ErrorType, code stripe.ErrorCode) {
	t.Helper()
	_ = asStripeError(t, err, status, typ, code)
}

// asStripeError is requireStripeError, returning the error for a closer look.
func asStripeError(t *testing.T, err error, status int, typ stripe.ErrorType, code stripe.ErrorCode) *stripe.Error {
	t.Helper()
	var stripeErr *stripe.Error
	require.ErrorAs(t, err, &stripeErr)
	require.Equal(t, status, stripeErr.HTTPStatusCode, stripeErr.Msg)
	require.Equal(t, typ, stripeErr.Type, stripeErr.Msg)
	require.Equal(t, code, stripeErr.Code, stripeErr.Msg)
	return stripeErr
}

func TestAuth(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		fake *fake
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{fake: startFake(t, &fakestripe.Config{})}
	}

	t.Run("RejectsRequestWithoutKey", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		resp := bundle.fake.do(t, http.MethodGet, "/v1/charges", "", "", "")
		require.Equal(t, http.StatusUnauthorized, resp.status)
		envelope := decode[stripeError](t, resp.body)
		require.Equal(t, "invalid_request_error", envelope.Error.Type)
		require.Contains(t, envelope.Error.Message, "You did not provide an API key")

		resp = bundle.fake.do(t, http.MethodPost, "/v1/charges", "", "", "amount=2000&currency=usd")
		require.Equal(t, http.StatusUnauthorized, resp.status)
		require.Equal(t, 0, bundle.fake.server.Stats().ChargeRequests, "an unauthenticated request is not a charge request")
	})

	t.Run("RejectsKeyThatIsNotSecret", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		for _, key := range []string{"pk_test_123", "sk_", "rk_test_123"} {
			resp := bundle.fake.do(t, http.MethodGet, "/v1/charges", key, "", "")
			require.Equal(t, http.StatusUnauthorized, resp.status, key)
			envelope := decode[stripeError](t, resp.body)
			require.Equal(t, "invalid_request_error", envelope.Error.Type)
			require.Contains(t, envelope.Error.Message, "Invalid API Key provided")
		}

		_, err := fakestripetest.NewClient(bundle.fake.baseURL, "pk_test_123").Charges.Get("ch_123", nil)
		requireStripeError(t, err, http.StatusUnauthorized, stripe.ErrorTypeInvalidRequest, "")
	})

	t.Run("AcceptsBearerKey", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		for _, key := range []string{"sk_test_123", "sk_live_123", "sk_anything"} {
			resp := bundle.fake.do(t, http.MethodGet, "/v1/charges", key, "", "")
			require.Equal(t, http.StatusOK, resp.status, key)
		}
	})

	t.Run("AcceptsBasicAuthKey", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, bundle.fake.baseURL+"/v1/charges", nil)
		require.NoError(t, err)
		req.SetBasicAuth(testAPIKey, "") // curl -u sk_test_123:
		require.Equal(t, http.StatusOK, send(t, req).status)
	})

	t.Run("FakeControlsNeedNoKey", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		require.Equal(t, http.StatusOK, bundle.fake.do(t, http.MethodGet, "/_fake/faults", "", "", "").status)
		require.Equal(t, http.StatusOK, bundle.fake.do(t, http.MethodGet, "/_fake/stats", "", "", "").status)
	})

	t.Run("UnknownURLIsNotFound", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		resp := bundle.fake.do(t, http.MethodGet, "/v1/refunds", testAPIKey, "", "")
		require.Equal(t, http.StatusNotFound, resp.status)
		envelope := decode[stripeError](t, resp.body)
		require.Equal(t, "invalid_request_error", envelope.Error.Type)
		require.Contains(t, envelope.Error.Message, "Unrecognized request URL (GET: /v1/refunds)")

		resp = bundle.fake.do(t, http.MethodDelete, "/v1/charges", testAPIKey, "", "")
		require.Equal(t, http.StatusNotFound, resp.status)
	})
}

// isConnectionError reports whether err is a failure to get any answer,
// as opposed to an error Stripe answered with.
func isConnectionError(err error) bool {
	var stripeErr *stripe.Error
	return err != nil && !errors.As(err, &stripeErr)
}

func TestNew(t *testing.T) {
	t.Parallel()
	_, err := fakestripe.New(&fakestripe.Config{KeyRetention: -time.Hour})
	require.ErrorContains(t, err, "fakestripe: Config.KeyRetention must not be negative")
	server, err := fakestripe.New(nil)
	require.NoError(t, err, "every field is optional")
	require.NotNil(t, server)
}
