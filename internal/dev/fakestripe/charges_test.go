package fakestripe_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
	"github.com/rocketrides/rocketrides/internal/testkit/testclock"
)

func TestCharges(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		clock *testclock.Clock
		fake  *fake
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		clock := testclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		return &testBundle{clock: clock, fake: startFake(t, &fakestripe.Config{Now: clock.Now})}
	}

	t.Run("ChargesCustomer", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		customer := bundle.fake.createCustomer(t, "rider@example.com", fakestripe.TokenVisa)

		charge, err := bundle.fake.client.Charges.New(chargeParams(customer.ID, 2000, ""))
		require.NoError(t, err)
		require.Regexp(t, `^ch_[A-Za-z0-9]{24}$`, charge.ID)
		require.Equal(t, "charge", charge.Object)
		require.Equal(t, int64(2000), charge.Amount)
		require.Equal(t, int64(2000), charge.AmountCaptured)
		require.Equal(t, stripe.CurrencyUSD, charge.Currency)
		require.Equal(t, customer.ID, charge.Customer.ID)
		require.Equal(t, "Rocket ride", charge.Description)
		require.Equal(t, map[string]string{"ride_id": "42"}, charge.Metadata)
		require.Equal(t, stripe.ChargeStatusSucceeded, charge.Status)
		require.True(t, charge.Paid)
		require.True(t, charge.Captured)
		require.False(t, charge.Livemode)
		require.Equal(t, bundle.clock.Now().Unix(), charge.Created)
		require.Equal(t, "4242", charge.Source.Card.Last4)

		charges := bundle.fake.server.Charges()
		require.Len(t, charges, 1)
		require.Equal(t, charge.ID, charges[0].ID)
		require.Equal(t, "42", charges[0].Metadata["ride_id"])
	})

	t.Run("GetsCharge", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		customer := bundle.fake.createCustomer(t, "rider@example.com", fakestripe.TokenVisa)
		created, err := bundle.fake.client.Charges.New(chargeParams(customer.ID, 2000, ""))
		require.NoError(t, err)

		got, err := bundle.fake.client.Charges.Get(created.ID, nil)
		require.NoError(t, err)
		require.Equal(t, created.ID, got.ID)
		require.Equal(t, created.Amount, got.Amount)
		require.Equal(t, customer.ID, got.Customer.ID)
		require.Empty(t, got.Customer.Email, "customer is not expanded unless asked")

		params := &stripe.ChargeParams{}
		params.AddExpand("customer")
		got, err = bundle.fake.client.Charges.Get(created.ID, params)
		require.NoError(t, err)
		require.Equal(t, "rider@example.com", got.Customer.Email)
	})

	t.Run("ExpandsCustomerOnCreate", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		customer := bundle.fake.createCustomer(t, "rider@example.com", fakestripe.TokenVisa)

		params := chargeParams(customer.ID, 2000, "")
		params.AddExpand("customer")
		charge, err := bundle.fake.client.Charges.New(params)
		require.NoError(t, err)
		require.Equal(t, "rider@example.com", charge.Customer.Email)
	})

	t.Run("GetUnknownChargeIsNotFound", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.fake.client.Charges.Get("ch_missing", nil)
		stripeErr := asStripeError(t, err, http.StatusNotFound, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)
		require.Equal(t, "No such charge: 'ch_missing'", stripeErr.Msg)
		require.Equal(t, "id", stripeErr.Param)
	})

	t.Run("DeclinesChargeCustomerFail", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		customer := bundle.fake.createCustomer(t, "broke@example.com", fakestripe.TokenChargeCustomerFail)

		_, err := bundle.fake.client.Charges.New(chargeParams(customer.ID, 2000, ""))
		stripeErr := asStripeError(t, err, http.StatusPaymentRequired, stripe.ErrorTypeCard, stripe.ErrorCodeCardDeclined)
		require.Equal(t, "Your card was declined.", stripeErr.Msg)
		require.Equal(t, stripe.DeclineCodeGenericDecline, stripeErr.DeclineCode)
		var cardErr *stripe.CardError
		require.ErrorAs(t, err, &cardErr, "stripe-go types the error as a card error")

		// Like Stripe, the decline leaves a failed charge behind, named by
		// the error.
		charges := bundle.fake.server.Charges()
		require.Len(t, charges, 1)
		require.Equal(t, stripeErr.ChargeID, charges[0].ID)
		require.Equal(t, fakestripe.ChargeStatusFailed, charges[0].Status)
		require.False(t, charges[0].Paid)
		require.Equal(t, "card_declined", charges[0].FailureCode)
	})

	t.Run("ChargesTokenDirectly", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		charge, err := bundle.fake.client.Charges.New(&stripe.ChargeParams{
			Amount:   stripe.Int64(500),
			Currency: stripe.String("usd"),
			Source:   &stripe.PaymentSourceSourceParams{Token: stripe.String(fakestripe.TokenMastercard)},
		})
		require.NoError(t, err)
		require.Nil(t, charge.Customer)
		require.Equal(t, "4444", charge.Source.Card.Last4)
	})

	t.Run("RejectsUnknownCustomer", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.fake.client.Charges.New(chargeParams("cus_missing", 2000, ""))
		stripeErr := asStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)
		require.Equal(t, "customer", stripeErr.Param)
		require.Empty(t, bundle.fake.server.Charges())
	})

	t.Run("RejectsCustomerWithoutCard", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		customer, err := bundle.fake.client.Customers.New(&stripe.CustomerParams{Email: stripe.String("nocard@example.com")})
		require.NoError(t, err)

		_, err = bundle.fake.client.Charges.New(chargeParams(customer.ID, 2000, ""))
		requireStripeError(t, err, http.StatusPaymentRequired, stripe.ErrorTypeCard, stripe.ErrorCodeMissing)
	})

	t.Run("ValidatesAmountAndCurrency", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		customer := bundle.fake.createCustomer(t, "rider@example.com", fakestripe.TokenVisa)

		for _, tc := range []struct {
			form  url.Values
			param string
			code  string
		}{
			{url.Values{"currency": {"usd"}}, "amount", "parameter_missing"},
			{url.Values{"amount": {"twenty"}, "currency": {"usd"}}, "amount", "parameter_invalid_integer"},
			{url.Values{"amount": {"49"}, "currency": {"usd"}}, "amount", "amount_too_small"},
			{url.Values{"amount": {"100000000"}, "currency": {"usd"}}, "amount", "amount_too_large"},
			{url.Values{"amount": {"2000"}}, "currency", "parameter_missing"},
			{url.Values{"amount": {"2000"}, "currency": {"dollars"}}, "currency", ""},
		} {
			tc.form.Set("customer", customer.ID)
			resp := bundle.fake.do(t, http.MethodPost, "/v1/charges", testAPIKey, "", tc.form.Encode())
			require.Equal(t, http.StatusBadRequest, resp.status, tc.form.Encode())
			envelope := decode[stripeError](t, resp.body)
			require.Equal(t, "invalid_request_error", envelope.Error.Type, tc.form.Encode())
			require.Equal(t, tc.param, envelope.Error.Param, tc.form.Encode())
			require.Equal(t, tc.code, envelope.Error.Code, tc.form.Encode())
		}
		require.Empty(t, bundle.fake.server.Charges())
	})

	t.Run("GivesUniqueIDs", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		customer := bundle.fake.createCustomer(t, "rider@example.com", fakestripe.TokenVisa)

		seen := make(map[string]bool)
		for range 50 {
			charge, err := bundle.fake.client.Charges.New(chargeParams(customer.ID, 2000, ""))
			require.NoError(t, err)
			require.False(t, seen[charge.ID], charge.ID)
			seen[charge.ID] = true
		}
		require.Equal(t, 50, bundle.fake.server.Stats().Charges)
	})
}

func TestListCharges(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		fake     *fake
		start    time.Time
		customer *stripe.Customer
		other    *stripe.Customer
		// charges of customer, oldest first, one minute apart.
		charges []*stripe.Charge
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		clock := testclock.New(start)
		bundle := &testBundle{fake: startFake(t, &fakestripe.Config{Now: clock.Now}), start: start}
		bundle.customer = bundle.fake.createCustomer(t, "one@example.com", fakestripe.TokenVisa)
		bundle.other = bundle.fake.createCustomer(t, "two@example.com", fakestripe.TokenVisa)
		for i := range 5 {
			clock.Set(start.Add(time.Duration(i) * time.Minute))
			charge, err := bundle.fake.client.Charges.New(chargeParams(bundle.customer.ID, 1000+int64(i), ""))
			require.NoError(t, err)
			bundle.charges = append(bundle.charges, charge)
			_, err = bundle.fake.client.Charges.New(chargeParams(bundle.other.ID, 5000, ""))
			require.NoError(t, err)
		}
		return bundle
	}

	type page struct {
		Object  string `json:"object"`
		URL     string `json:"url"`
		HasMore bool   `json:"has_more"`
		Data    []struct {
			ID string `json:"id"`
		} `json:"data"`
	}

	ids := func(p page) []string {
		ids := make([]string, 0, len(p.Data))
		for _, d := range p.Data {
			ids = append(ids, d.ID)
		}
		return ids
	}

	t.Run("PaginatesNewestFirst", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		c := bundle.charges
		query := "/v1/charges?limit=2&customer=" + bundle.customer.ID

		first := decode[page](t, bundle.fake.do(t, http.MethodGet, query, testAPIKey, "", "").body)
		require.Equal(t, "list", first.Object)
		require.Equal(t, "/v1/charges", first.URL)
		require.True(t, first.HasMore)
		require.Equal(t, []string{c[4].ID, c[3].ID}, ids(first))

		second := decode[page](t, bundle.fake.do(t, http.MethodGet, query+"&starting_after="+c[3].ID, testAPIKey, "", "").body)
		require.True(t, second.HasMore)
		require.Equal(t, []string{c[2].ID, c[1].ID}, ids(second))

		last := decode[page](t, bundle.fake.do(t, http.MethodGet, query+"&starting_after="+c[1].ID, testAPIKey, "", "").body)
		require.False(t, last.HasMore)
		require.Equal(t, []string{c[0].ID}, ids(last))

		back := decode[page](t, bundle.fake.do(t, http.MethodGet, query+"&ending_before="+c[1].ID, testAPIKey, "", "").body)
		require.True(t, back.HasMore)
		require.Equal(t, []string{c[3].ID, c[2].ID}, ids(back))
	})

	t.Run("AutoPaginatesWithStripeGo", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		params := &stripe.ChargeListParams{Customer: stripe.String(bundle.customer.ID)}
		params.Limit = stripe.Int64(2)
		iter := bundle.fake.client.Charges.List(params)
		var got []string
		for iter.Next() {
			require.Equal(t, bundle.customer.ID, iter.Charge().Customer.ID)
			got = append(got, iter.Charge().ID)
		}
		require.NoError(t, iter.Err())

		var want []string
		for i := len(bundle.charges) - 1; i >= 0; i-- {
			want = append(want, bundle.charges[i].ID)
		}
		require.Equal(t, want, got)
	})

	t.Run("ListsAllCustomersByDefault", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		all := decode[page](t, bundle.fake.do(t, http.MethodGet, "/v1/charges", testAPIKey, "", "").body)
		require.Len(t, all.Data, 10)
		require.False(t, all.HasMore)

		other := decode[page](t, bundle.fake.do(t, http.MethodGet, "/v1/charges?customer="+bundle.other.ID, testAPIKey, "", "").body)
		require.Len(t, other.Data, 5)
	})

	t.Run("FiltersByCreated", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		c := bundle.charges
		minute := func(i int) int64 { return bundle.start.Add(time.Duration(i) * time.Minute).Unix() }

		params := &stripe.ChargeListParams{
			Customer:     stripe.String(bundle.customer.ID),
			CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: minute(1), LesserThanOrEqual: minute(3)},
		}
		iter := bundle.fake.client.Charges.List(params)
		var got []string
		for iter.Next() {
			got = append(got, iter.Charge().ID)
		}
		require.NoError(t, iter.Err())
		require.Equal(t, []string{c[3].ID, c[2].ID, c[1].ID}, got)

		query := fmt.Sprintf("/v1/charges?customer=%s&created[gt]=%d&created[lt]=%d", bundle.customer.ID, minute(1), minute(3))
		require.Equal(t, []string{c[2].ID}, ids(decode[page](t, bundle.fake.do(t, http.MethodGet, query, testAPIKey, "", "").body)))

		query = fmt.Sprintf("/v1/charges?customer=%s&created=%d", bundle.customer.ID, minute(4))
		require.Equal(t, []string{c[4].ID}, ids(decode[page](t, bundle.fake.do(t, http.MethodGet, query, testAPIKey, "", "").body)))
	})

	t.Run("RendersEmptyDataAsArray", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		resp := bundle.fake.do(t, http.MethodGet, "/v1/charges?customer=cus_nobody", testAPIKey, "", "")
		require.Equal(t, http.StatusOK, resp.status)
		require.Contains(t, string(resp.body), `"data":[]`)
	})

	t.Run("RejectsBadListParams", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		for query, param := range map[string]string{
			"limit=0":                          "limit",
			"limit=101":                        "limit",
			"limit=ten":                        "limit",
			"created[gte]=yesterday":           "created[gte]",
			"starting_after=ch_missing":        "starting_after",
			"starting_after=a&ending_before=b": "ending_before",
		} {
			resp := bundle.fake.do(t, http.MethodGet, "/v1/charges?"+query, testAPIKey, "", "")
			require.Equal(t, http.StatusBadRequest, resp.status, query)
			require.Equal(t, param, decode[stripeError](t, resp.body).Error.Param, query)
		}
	})
}
