package fakestripe

import (
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
)

// Stripe's test tokens the fake knows. A customer's source is one of these;
// the card it stands for decides what happens to charges against it.
const (
	// TokenVisa is a Visa card ending 4242: charges succeed.
	TokenVisa = "tok_visa"
	// TokenMastercard is a Mastercard ending 4444: charges succeed.
	TokenMastercard = "tok_mastercard"
	// TokenChargeCustomerFail is a Visa card ending 0341: it attaches to a
	// customer, but every charge against it is declined.
	TokenChargeCustomerFail = "tok_chargeCustomerFail"
	// TokenChargeDeclined is a Visa card ending 0002: declined as soon as it
	// is attached to a customer or charged.
	TokenChargeDeclined = "tok_chargeDeclined"
)

// testCard is what a test token stands for.
type testCard struct {
	brand          string
	last4          string
	declineCharges bool
	declineAttach  bool
}

var testCards = map[string]testCard{
	TokenVisa:               {brand: "Visa", last4: "4242"},
	TokenMastercard:         {brand: "MasterCard", last4: "4444"},
	TokenChargeCustomerFail: {brand: "Visa", last4: "0341", declineCharges: true},
	TokenChargeDeclined:     {brand: "Visa", last4: "0002", declineCharges: true, declineAttach: true},
}

// Card is a card source, made from a test token.
type Card struct {
	ID       string            `json:"id"`
	Object   string            `json:"object"`
	Brand    string            `json:"brand"`
	Country  string            `json:"country"`
	Customer string            `json:"customer"`
	ExpMonth int64             `json:"exp_month"`
	ExpYear  int64             `json:"exp_year"`
	Funding  string            `json:"funding"`
	Last4    string            `json:"last4"`
	Metadata map[string]string `json:"metadata"`

	// declines is whether the issuer declines charges against this card.
	declines bool
}

// newCard issues the card a test token stands for, attached to customerID
// if it isn't empty.
func newCard(token, customerID string, created int64) (*Card, bool) {
	tc, ok := testCards[token]
	if !ok {
		return nil, false
	}
	return &Card{
		ID:       newID("card_", 24),
		Object:   "card",
		Brand:    tc.brand,
		Country:  "US",
		Customer: customerID,
		ExpMonth: 12,
		// Always some years ahead, so the card never expires under a test.
		ExpYear:  int64(unixYear(created) + 5),
		Funding:  "credit",
		Last4:    tc.last4,
		Metadata: map[string]string{},
		declines: tc.declineCharges,
	}, true
}

func (c *Card) clone() *Card {
	if c == nil {
		return nil
	}
	clone := *c
	clone.Metadata = maps.Clone(c.Metadata)
	return &clone
}

// cardResource is a Card as the API renders it: customer is null on a card
// charged directly from a token.
type cardResource struct {
	*Card
	Customer *string `json:"customer"`
}

func (c *Card) resource() cardResource {
	return cardResource{Card: c, Customer: nullable(c.Customer)}
}

// Customer is a Stripe customer.
type Customer struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Balance       int64             `json:"balance"`
	Created       int64             `json:"created"`
	DefaultSource string            `json:"default_source"`
	Delinquent    bool              `json:"delinquent"`
	Description   string            `json:"description"`
	Email         string            `json:"email"`
	Livemode      bool              `json:"livemode"`
	Metadata      map[string]string `json:"metadata"`
	Name          string            `json:"name"`
	Phone         string            `json:"phone"`

	// Card is the default source, the card charges against the customer
	// use. Nil when the customer was created without a source.
	Card *Card `json:"-"`
}

func (c *Customer) clone() *Customer {
	clone := *c
	clone.Metadata = maps.Clone(c.Metadata)
	clone.Card = c.Card.clone()
	return &clone
}

// customerResource is a Customer as the API renders it: Stripe sends null,
// not "", for absent strings, and default_source is expandable (its ID, or
// the card under expand[]=default_source).
type customerResource struct {
	*Customer
	DefaultSource any     `json:"default_source"`
	Description   *string `json:"description"`
	Email         *string `json:"email"`
	Name          *string `json:"name"`
	Phone         *string `json:"phone"`
}

func (c *Customer) resource(expandDefaultSource bool) customerResource {
	r := customerResource{
		Customer:    c,
		Description: nullable(c.Description),
		Email:       nullable(c.Email),
		Name:        nullable(c.Name),
		Phone:       nullable(c.Phone),
	}
	switch {
	case c.Card == nil:
		r.DefaultSource = nil
	case expandDefaultSource:
		r.DefaultSource = c.Card.resource()
	default:
		r.DefaultSource = c.Card.ID
	}
	return r
}

// Customers returns a snapshot of every customer, in creation order.
func (s *Server) Customers() []Customer {
	s.mu.Lock()
	defer s.mu.Unlock()
	customers := make([]Customer, 0, len(s.customers))
	for _, c := range s.customers {
		customers = append(customers, *c.clone())
	}
	return customers
}

// createCustomer handles POST /v1/customers.
func (s *Server) createCustomer(r *http.Request) response {
	form := r.Form
	metadata, apiErr := parseMetadata(form)
	if apiErr != nil {
		return rejected(apiErr)
	}
	email := form.Get("email")
	if email != "" && !strings.Contains(email, "@") {
		return rejected(invalidRequest(http.StatusBadRequest, "email_invalid", "email",
			"Invalid email address: %s", email))
	}
	token := form.Get("source")
	if _, ok := testCards[token]; token != "" && !ok {
		return rejected(noSuch(http.StatusBadRequest, "source", "token", token))
	}
	if testCards[token].declineAttach {
		// The issuer declined the card while it was being attached: the
		// request executed, and no customer came of it.
		return failedExecuting(cardDeclined(""))
	}

	s.mu.Lock()
	created := s.nowLocked().Unix()
	customer := &Customer{
		ID:          s.uniqueCustomerIDLocked(),
		Object:      "customer",
		Created:     created,
		Description: form.Get("description"),
		Email:       email,
		Livemode:    livemode(r),
		Metadata:    metadata,
		Name:        form.Get("name"),
		Phone:       form.Get("phone"),
	}
	if token != "" {
		customer.Card, _ = newCard(token, customer.ID, created)
		customer.DefaultSource = customer.Card.ID
	}
	s.customers = append(s.customers, customer)
	s.customersBy[customer.ID] = customer
	s.recordLocked(customerEntry(customer))
	s.mu.Unlock()

	return succeeded(http.StatusOK, customer.resource(parseExpand(form)["default_source"]))
}

func (s *Server) uniqueCustomerIDLocked() string {
	for {
		if id := newID("cus_", 14); s.customersBy[id] == nil {
			return id
		}
	}
}

// customer returns the customer with id, or nil.
func (s *Server) customer(id string) *Customer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.customersBy[id]
}

// getCustomer handles GET /v1/customers/{id}.
func (s *Server) getCustomer(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	customer := s.customer(id)
	if customer == nil {
		writeError(w, noSuch(http.StatusNotFound, "id", "customer", id))
		return
	}
	writeJSON(w, http.StatusOK, customer.resource(parseExpand(r.URL.Query())["default_source"]))
}

// listCustomers handles GET /v1/customers, optionally filtered by exact
// email, as a seed looks up the customers it made on an earlier run.
func (s *Server) listCustomers(w http.ResponseWriter, r *http.Request) {
	query := r.URL.Query()
	params, apiErr := parseListParams(query)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	email := query.Get("email")

	s.mu.Lock()
	all := newestFirst(s.customers, func(c *Customer) int64 { return c.Created })
	s.mu.Unlock()

	page, hasMore, apiErr := paginate(all,
		func(c *Customer) string { return c.ID },
		func(c *Customer) bool { return (email == "" || c.Email == email) && params.created.matches(c.Created) },
		params, "customer")
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}

	data := make([]customerResource, 0, len(page))
	for _, c := range page {
		data = append(data, c.resource(params.expand["data.default_source"]))
	}

	writeJSON(w, http.StatusOK, list[customerResource]{Object: "list", Data: data, HasMore: hasMore, URL: "/v1/customers"})
}

// livemode is whether the request was made with a live key. Nothing here
// is live; the flag only echoes the key, as a live account's objects would.
func livemode(r *http.Request) bool {
	return strings.HasPrefix(apiKey(r), "sk_live_")
}

func unixYear(unix int64) int {
	return time.Unix(unix, 0).UTC().Year()
}

// nullable renders "" as JSON null, as Stripe renders absent strings.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
