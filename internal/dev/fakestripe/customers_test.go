package fakestripe_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
)

func TestCustomers(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		fake *fake
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{fake: startFake(t, &fakestripe.Config{})}
	}

	t.Run("CreatesAndGetsCustomer", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		params := &stripe.CustomerParams{
			Email:       stripe.String("rider@example.com"),
			Description: stripe.String("Rider"),
			Source:      stripe.String(fakestripe.TokenVisa),
		}
		params.AddMetadata("user_id", "7")
		created, err := bundle.fake.client.Customers.New(params)
		require.NoError(t, err)
		require.Regexp(t, `^cus_[A-Za-z0-9]{14}$`, created.ID)
		require.Equal(t, "customer", created.Object)
		require.Equal(t, "rider@example.com", created.Email)
		require.Equal(t, "Rider", created.Description)
		require.Equal(t, map[string]string{"user_id": "7"}, created.Metadata)
		require.False(t, created.Livemode)
		require.NotNil(t, created.DefaultSource)
		require.Regexp(t, `^card_`, created.DefaultSource.ID)

		getParams := &stripe.CustomerParams{}
		getParams.AddExpand("default_source")
		got, err := bundle.fake.client.Customers.Get(created.ID, getParams)
		require.NoError(t, err)
		require.Equal(t, created.ID, got.ID)
		require.Equal(t, created.Created, got.Created)
		require.NotNil(t, got.DefaultSource.Card, "default_source is expanded into the card")
		require.Equal(t, "4242", got.DefaultSource.Card.Last4)
		require.Equal(t, created.ID, got.DefaultSource.Card.Customer.ID)

		customers := bundle.fake.server.Customers()
		require.Len(t, customers, 1)
		require.Equal(t, created.ID, customers[0].ID)
		require.Equal(t, 1, bundle.fake.server.Stats().Customers)
	})

	t.Run("RendersAbsentFieldsAsNull", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		resp := bundle.fake.do(t, http.MethodPost, "/v1/customers", testAPIKey, "", "email=a%40example.com")
		require.Equal(t, http.StatusOK, resp.status, string(resp.body))
		customer := decode[map[string]any](t, resp.body)
		require.Nil(t, customer["default_source"])
		require.Nil(t, customer["description"])
		require.Contains(t, customer, "description")
		require.Equal(t, map[string]any{}, customer["metadata"])
	})

	t.Run("GetUnknownCustomerIsNotFound", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.fake.client.Customers.Get("cus_missing", nil)
		stripeErr := asStripeError(t, err, http.StatusNotFound, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)
		require.Equal(t, "No such customer: 'cus_missing'", stripeErr.Msg)
	})

	t.Run("ListsCustomersByEmail", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		want := bundle.fake.createCustomer(t, "one@example.com", fakestripe.TokenVisa)
		bundle.fake.createCustomer(t, "two@example.com", fakestripe.TokenVisa)

		iter := bundle.fake.client.Customers.List(&stripe.CustomerListParams{Email: stripe.String("one@example.com")})
		var ids []string
		for iter.Next() {
			ids = append(ids, iter.Customer().ID)
		}
		require.NoError(t, iter.Err())
		require.Equal(t, []string{want.ID}, ids)

		iter = bundle.fake.client.Customers.List(&stripe.CustomerListParams{Email: stripe.String("nobody@example.com")})
		require.False(t, iter.Next())
		require.NoError(t, iter.Err())
	})

	t.Run("RejectsUnknownToken", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.fake.client.Customers.New(&stripe.CustomerParams{Source: stripe.String("tok_bogus")})
		stripeErr := asStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)
		require.Equal(t, "source", stripeErr.Param)
		require.Empty(t, bundle.fake.server.Customers())
	})

	t.Run("RejectsInvalidEmail", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.fake.client.Customers.New(&stripe.CustomerParams{Email: stripe.String("not-an-email")})
		stripeErr := asStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeEmailInvalid)
		require.Equal(t, "email", stripeErr.Param)
	})

	t.Run("DeclinesCardOnAttach", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.fake.client.Customers.New(&stripe.CustomerParams{Source: stripe.String(fakestripe.TokenChargeDeclined)})
		requireStripeError(t, err, http.StatusPaymentRequired, stripe.ErrorTypeCard, stripe.ErrorCodeCardDeclined)
		require.Empty(t, bundle.fake.server.Customers())
	})

	t.Run("CreatesCustomerWhoseChargesFail", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		customer := bundle.fake.createCustomer(t, "broke@example.com", fakestripe.TokenChargeCustomerFail)
		require.NotNil(t, customer.DefaultSource)
	})
}
