package fakestripe

import (
	"maps"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"
)

// Stripe's bounds on a charge amount, in the currency's smallest unit.
// Stripe's minimum varies by currency; only usd's is enforced here.
const (
	minAmountUSD = 50
	maxAmount    = 99_999_999
)

// Charge statuses.
const (
	ChargeStatusSucceeded = "succeeded"
	ChargeStatusFailed    = "failed"
)

// Charge is a Stripe charge. A declined charge is kept too, with status
// "failed", as Stripe keeps it.
type Charge struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Amount         int64             `json:"amount"`
	AmountCaptured int64             `json:"amount_captured"`
	AmountRefunded int64             `json:"amount_refunded"`
	Captured       bool              `json:"captured"`
	Created        int64             `json:"created"`
	Currency       string            `json:"currency"`
	Customer       string            `json:"customer"`
	Description    string            `json:"description"`
	FailureCode    string            `json:"failure_code"`
	FailureMessage string            `json:"failure_message"`
	Livemode       bool              `json:"livemode"`
	Metadata       map[string]string `json:"metadata"`
	Paid           bool              `json:"paid"`
	PaymentMethod  string            `json:"payment_method"`
	Refunded       bool              `json:"refunded"`
	Source         *Card             `json:"source"`
	Status         string            `json:"status"`
}

func (c *Charge) clone() Charge {
	clone := *c
	clone.Metadata = maps.Clone(c.Metadata)
	clone.Source = c.Source.clone()
	return clone
}

// chargeResource is a Charge as the API renders it: Stripe sends null, not
// "", for absent strings, and customer is expandable (its ID, or the
// customer under expand[]=customer).
type chargeResource struct {
	*Charge
	Customer       any          `json:"customer"`
	Description    *string      `json:"description"`
	FailureCode    *string      `json:"failure_code"`
	FailureMessage *string      `json:"failure_message"`
	Source         cardResource `json:"source"`
}

// resource renders c; customer is the expanded customer, or nil to render
// the customer's ID.
func (c *Charge) resource(customer *Customer) chargeResource {
	r := chargeResource{
		Charge:         c,
		Description:    nullable(c.Description),
		FailureCode:    nullable(c.FailureCode),
		FailureMessage: nullable(c.FailureMessage),
		Source:         c.Source.resource(),
	}
	switch {
	case c.Customer == "":
		r.Customer = nil
	case customer != nil:
		r.Customer = customer.resource(false)
	default:
		r.Customer = c.Customer
	}
	return r
}

// Charges returns a snapshot of every charge, failed ones included, in
// creation order.
func (s *Server) Charges() []Charge {
	s.mu.Lock()
	defer s.mu.Unlock()
	charges := make([]Charge, 0, len(s.charges))
	for _, c := range s.charges {
		charges = append(charges, c.clone())
	}
	return charges
}

// chargeParams are the parameters of POST /v1/charges the fake understands;
// others are accepted and ignored.
type chargeParams struct {
	amount      int64
	currency    string
	customer    string
	source      string
	description string
	metadata    map[string]string
	expand      map[string]bool
}

func parseChargeParams(form url.Values) (chargeParams, *apiError) {
	p := chargeParams{
		currency:    strings.ToLower(form.Get("currency")),
		customer:    form.Get("customer"),
		source:      form.Get("source"),
		description: form.Get("description"),
		expand:      parseExpand(form),
	}

	amount, present, apiErr := parseInt(form, "amount")
	switch {
	case apiErr != nil:
		return chargeParams{}, apiErr
	case !present:
		return chargeParams{}, missingParam("amount")
	}
	p.amount = amount

	switch {
	case p.currency == "":
		return chargeParams{}, missingParam("currency")
	case !isCurrencyCode(p.currency):
		return chargeParams{}, invalidRequest(http.StatusBadRequest, "", "currency",
			"Invalid currency: %s. Currencies are three-letter ISO codes such as usd.", p.currency)
	}

	minAmount := int64(1)
	if p.currency == "usd" {
		minAmount = minAmountUSD
	}
	switch {
	case p.amount < minAmount:
		return chargeParams{}, invalidRequest(http.StatusBadRequest, "amount_too_small", "amount",
			"Amount must be at least %d in the smallest unit of %s.", minAmount, p.currency)
	case p.amount > maxAmount:
		return chargeParams{}, invalidRequest(http.StatusBadRequest, "amount_too_large", "amount",
			"Amount must be no more than %d in the smallest unit of %s.", maxAmount, p.currency)
	}

	if p.customer == "" && p.source == "" {
		return chargeParams{}, invalidRequest(http.StatusBadRequest, "parameter_missing", "customer",
			"Must provide source or customer.")
	}

	p.metadata, apiErr = parseMetadata(form)
	if apiErr != nil {
		return chargeParams{}, apiErr
	}
	return p, nil
}

func isCurrencyCode(s string) bool {
	if len(s) != 3 {
		return false
	}
	for _, r := range s {
		if r < 'a' || r > 'z' {
			return false
		}
	}
	return true
}

// createCharge handles POST /v1/charges: the foreign state mutation the
// idempotency keys protect. The faults that act during execution act here;
// FailNext acted earlier, in chargeFrontDoor.
func (s *Server) createCharge(r *http.Request) response {
	params, apiErr := parseChargeParams(r.Form)
	if apiErr != nil {
		return rejected(apiErr)
	}

	if err := s.chargeLatency(r.Context()); err != nil {
		// The client gave up before the charge executed; nothing to store,
		// and nobody to answer.
		return rejected(internalError("Request canceled: %v", err))
	}

	if r.Header.Get("Idempotency-Key") != "" && s.takeFault(func(f *Faults) *int { return &f.StoreFailureNext }) {
		return failedExecuting(internalError(
			"An unknown error occurred while processing your request. (injected fault: store_failure_next)"))
	}

	resp := s.executeCharge(r, params)
	if resp.executed && s.takeFault(func(f *Faults) *int { return &f.DropAfterCommitNext }) {
		resp.drop = true
	}
	return resp
}

// executeCharge charges the customer's default card, or the card a token
// stands for, and records the charge, succeeded or declined.
func (s *Server) executeCharge(r *http.Request, params chargeParams) response {
	s.mu.Lock()
	now := s.nowLocked()

	var customer *Customer
	var card *Card
	if params.customer != "" {
		customer = s.customersBy[params.customer]
		switch {
		case customer == nil:
			s.mu.Unlock()
			return rejected(noSuch(http.StatusBadRequest, "customer", "customer", params.customer))
		case params.source != "" && (customer.Card == nil || params.source != customer.Card.ID):
			s.mu.Unlock()
			return rejected(invalidRequest(http.StatusBadRequest, "resource_missing", "source",
				"Customer %s does not have a linked source with ID %s.", customer.ID, params.source))
		case customer.Card == nil:
			s.mu.Unlock()
			return failedExecuting(&apiError{
				status:  http.StatusPaymentRequired,
				Type:    errorTypeCard,
				Code:    "missing",
				Param:   "card",
				Message: "Cannot charge a customer that has no active card",
			})
		}
		card = customer.Card
	} else {
		var ok bool
		card, ok = newCard(params.source, "", now.Unix())
		if !ok {
			s.mu.Unlock()
			return rejected(noSuch(http.StatusBadRequest, "source", "token", params.source))
		}
	}

	charge := &Charge{
		ID:            s.uniqueChargeIDLocked(),
		Object:        "charge",
		Amount:        params.amount,
		Created:       now.Unix(),
		Currency:      params.currency,
		Customer:      params.customer,
		Description:   params.description,
		Livemode:      livemode(r),
		Metadata:      params.metadata,
		PaymentMethod: card.ID,
		Source:        card,
	}
	if card.declines {
		charge.Status = ChargeStatusFailed
		charge.FailureCode = "card_declined"
		charge.FailureMessage = "Your card was declined."
	} else {
		charge.Status = ChargeStatusSucceeded
		charge.AmountCaptured = charge.Amount
		charge.Captured = true
		charge.Paid = true
	}
	s.charges = append(s.charges, charge)
	s.chargesByID[charge.ID] = charge
	s.recordLocked(chargeEntry(charge))
	s.mu.Unlock()

	if charge.Status == ChargeStatusFailed {
		return failedExecuting(cardDeclined(charge.ID))
	}
	if !params.expand["customer"] {
		customer = nil
	}
	return succeeded(http.StatusOK, charge.resource(customer))
}

func (s *Server) uniqueChargeIDLocked() string {
	for {
		if id := newID("ch_", 24); s.chargesByID[id] == nil {
			return id
		}
	}
}

// getCharge handles GET /v1/charges/{id}.
func (s *Server) getCharge(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")

	s.mu.Lock()
	charge := s.chargesByID[id]
	s.mu.Unlock()
	if charge == nil {
		writeError(w, noSuch(http.StatusNotFound, "id", "charge", id))
		return
	}

	var customer *Customer
	if parseExpand(r.URL.Query())["customer"] {
		customer = s.customer(charge.Customer)
	}
	writeJSON(w, http.StatusOK, charge.resource(customer))
}

// updateCharge handles POST /v1/charges/{id}, the update of a charge's
// description and metadata. Like Stripe's, it never moves money: metadata
// is merged into the charge's, and a key sent empty is removed.
func (s *Server) updateCharge(r *http.Request) response {
	id := chi.URLParam(r, "id")
	metadata, apiErr := parseMetadata(r.Form)
	if apiErr != nil {
		return rejected(apiErr)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.chargesByID[id]
	if old == nil {
		return rejected(noSuch(http.StatusNotFound, "id", "charge", id))
	}
	updated := old.clone()
	if updated.Metadata == nil {
		updated.Metadata = make(map[string]string)
	}
	for k, v := range metadata {
		if v == "" {
			delete(updated.Metadata, k)
		} else {
			updated.Metadata[k] = v
		}
	}
	if len(updated.Metadata) > maxMetadataKeys {
		return rejected(invalidRequest(http.StatusBadRequest, "", "metadata",
			"You can have up to %d metadata keys, but you passed in %d.", maxMetadataKeys, len(updated.Metadata)))
	}
	if r.Form.Has("description") {
		updated.Description = r.Form.Get("description")
	}
	// Replaced, not changed in place: a handler may be rendering the old
	// one outside the mutex.
	s.chargesByID[id] = &updated
	for i, c := range s.charges {
		if c == old {
			s.charges[i] = &updated
		}
	}
	s.recordLocked(chargeEntry(&updated))
	return succeeded(http.StatusOK, updated.resource(nil))
}

// listCharges handles GET /v1/charges: newest first, optionally one
// customer's, optionally within a created range.
func (s *Server) listCharges(w http.ResponseWriter, r *http.Request) {
	query := r.URL.Query()
	params, apiErr := parseListParams(query)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	customerID := query.Get("customer")

	s.mu.Lock()
	all := newestFirst(s.charges, func(c *Charge) int64 { return c.Created })
	s.mu.Unlock()

	page, hasMore, apiErr := paginate(all,
		func(c *Charge) string { return c.ID },
		func(c *Charge) bool {
			return (customerID == "" || c.Customer == customerID) && params.created.matches(c.Created)
		},
		params, "charge")
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}

	data := make([]chargeResource, 0, len(page))
	for _, c := range page {
		var customer *Customer
		if params.expand["data.customer"] {
			customer = s.customer(c.Customer)
		}
		data = append(data, c.resource(customer))
	}
	writeJSON(w, http.StatusOK, list[chargeResource]{Object: "list", Data: data, HasMore: hasMore, URL: "/v1/charges"})
}
