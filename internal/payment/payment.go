// Package payment charges customers through Stripe. It is the project's one
// foreign state mutation on the request path: everything here happens
// outside any database transaction, and every charge carries an idempotency
// key so that repeating a call after a crash or a timeout cannot charge
// twice.
//
// Errors are sorted into the three outcomes the caller must tell apart:
// a decline (final, the customer's card said no), a rejection (final, the
// request itself was wrong) and unavailability (nothing is known; retry
// with the same idempotency key).
package payment

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/rocketrides/rocketrides/internal/platform/metrics"
	"github.com/rocketrides/rocketrides/internal/platform/trace"
)

// ErrUnavailable means Stripe could not be reached or answered with a
// transient error (timeout, 5xx, 429, a request in flight with the same
// key). The charge may or may not exist; repeating the call with the same
// idempotency key resolves it.
var ErrUnavailable = errors.New("payment provider unavailable")

// ErrOutcomeUnknown marks the kind of unavailability that may have
// executed and will not resolve by asking again: Stripe answered 500,
// which it stores against the idempotency key and replays on every retry
// with that key. Errors wrapping it also wrap ErrUnavailable.
var ErrOutcomeUnknown = errors.New("payment outcome unknown")

// ErrKeyConflict means Stripe refused the charge because its idempotency
// key was first used with other parameters. Nothing was charged by this
// call, but a charge may exist under the key: the caller must not charge
// again under another key before a person has looked. Errors wrapping it
// also wrap a *RejectedError.
var ErrKeyConflict = errors.New("idempotency key used with other parameters")

// DeclinedError is a card error: the charge did not happen and will not
// happen however often it is retried.
type DeclinedError struct {
	Message string
	Code    string
}

func (e *DeclinedError) Error() string { return "card declined: " + e.Message }

// RejectedError is any other final error from Stripe, such as an invalid
// request: retrying the same request cannot succeed.
type RejectedError struct {
	Message string
	Status  int
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("payment rejected (status %d): %s", e.Status, e.Message)
}

// Outcome is how a call to Stripe ended, sorted by what the caller does
// next. It is also the outcome label of the Stripe metrics.
type Outcome = metrics.StripeOutcome

// The outcomes of a call to Stripe.
const (
	// Succeeded: Stripe did what was asked.
	Succeeded = metrics.StripeSucceeded
	// Declined: the card said no (a *DeclinedError). Final.
	Declined = metrics.StripeDeclined
	// Rejected: Stripe refused the request itself (a *RejectedError).
	// Final.
	Rejected = metrics.StripeRejected
	// Unavailable: no usable answer (ErrUnavailable). The call may or may
	// not have happened; repeating it with the same idempotency key
	// settles which, unless the error is also ErrOutcomeUnknown.
	Unavailable = metrics.StripeUnavailable
)

// OutcomeOf sorts err, as returned by a Gateway, into its Outcome.
func OutcomeOf(err error) Outcome {
	var (
		declined *DeclinedError
		rejected *RejectedError
	)
	switch {
	case err == nil:
		return Succeeded
	case errors.As(err, &declined):
		return Declined
	case errors.As(err, &rejected):
		return Rejected
	default:
		return Unavailable
	}
}

// Message is Stripe's message for a Declined or Rejected call, which is
// meant to be shown to the customer; empty for any other error.
func Message(err error) string {
	var (
		declined *DeclinedError
		rejected *RejectedError
	)
	switch {
	case errors.As(err, &declined):
		return declined.Message
	case errors.As(err, &rejected):
		return rejected.Message
	default:
		return ""
	}
}

// DefaultTimeout bounds one HTTP attempt at Stripe when Config.Timeout is
// zero.
const DefaultTimeout = 20 * time.Second

// Config configures a Gateway.
type Config struct {
	// APIKey is a Stripe secret key (sk_test_... in development).
	// Required.
	APIKey string
	// BaseURL points the client elsewhere than api.stripe.com, such as the
	// local Stripe fake. Without /v1. Empty means api.stripe.com.
	BaseURL string
	// Timeout bounds one HTTP attempt. Zero means DefaultTimeout.
	Timeout time.Duration
	// MaxNetworkRetries is how often stripe-go itself repeats a request
	// that failed on the network or with 409/429/503, reusing the same
	// idempotency key. Nil keeps stripe-go's default (2).
	MaxNetworkRetries *int64
	// Metrics counts and times the calls of a ride's charge step (Charge
	// and FindCharge) by Outcome. Nil records nothing.
	Metrics *metrics.Stripe
}

func (c *Config) validate() error {
	switch {
	case c.APIKey == "":
		return errors.New("payment: Config.APIKey is required")
	case c.BaseURL != "" && !httpURL(c.BaseURL):
		return errors.New("payment: Config.BaseURL must be an http:// or https:// URL")
	case c.Timeout < 0:
		return fmt.Errorf("payment: Config.Timeout must not be negative, got %s", c.Timeout)
	case c.MaxNetworkRetries != nil && *c.MaxNetworkRetries < 0:
		return fmt.Errorf("payment: Config.MaxNetworkRetries must not be negative, got %d", *c.MaxNetworkRetries)
	}
	return nil
}

// Gateway is the project's Stripe client: every call to Stripe goes
// through one.
type Gateway struct {
	api     *client.API
	metrics *metrics.Stripe
}

// New returns a Gateway for config.
func New(config *Config) (*Gateway, error) {
	api, err := NewStripeClient(config)
	if err != nil {
		return nil, err
	}
	return &Gateway{api: api, metrics: config.Metrics}, nil
}

// NewStripeClient returns the stripe-go client a Gateway built from config
// wraps (Metrics aside), for code that must speak Stripe's whole API
// rather than the Gateway's few calls: the Stripe fake's own tests.
// Product code goes through a Gateway.
func NewStripeClient(config *Config) (*client.API, error) {
	if config == nil {
		config = &Config{}
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	backendConfig := &stripe.BackendConfig{
		// No Client.Timeout: the transport bounds each attempt itself
		// (attemptTransport), so that net/http keeps its cheaper way of
		// cancelling a request.
		HTTPClient: &http.Client{Transport: trace.Transport(newTransport(cmp.Or(config.Timeout, DefaultTimeout)))},
		// Failures come back as errors and are logged by the caller
		// with the request's context; stripe-go's own lines would only
		// repeat them without it.
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		MaxNetworkRetries: config.MaxNetworkRetries,
		// Telemetry headers would report timings to Stripe; the fake has
		// no use for them.
		EnableTelemetry: stripe.Bool(false),
	}
	if config.BaseURL != "" {
		backendConfig.URL = stripe.String(config.BaseURL)
	}
	return client.New(config.APIKey, &stripe.Backends{
		API:     stripe.GetBackendWithConfig(stripe.APIBackend, backendConfig),
		Connect: stripe.GetBackendWithConfig(stripe.ConnectBackend, backendConfig),
		Uploads: stripe.GetBackendWithConfig(stripe.UploadsBackend, backendConfig),
	}), nil
}

// maxIdleConnsPerHost is how many idle connections to Stripe the
// Gateway keeps. Every request in flight holds one Stripe connection while
// it charges, so this should cover the api's concurrent charges: Go's
// default of 2 closes almost every connection after one use under load,
// and each charge then pays for a new TCP and TLS handshake and leaves a
// socket in TIME_WAIT.
const maxIdleConnsPerHost = 256

// newTransport is Go's default transport with room to keep connections to
// Stripe alive between charges, each attempt bounded by timeout and sent
// with its body's length.
func newTransport(timeout time.Duration) http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = maxIdleConnsPerHost
	t.MaxIdleConnsPerHost = maxIdleConnsPerHost
	return attemptTransport{t, timeout}
}

// attemptTransport bounds each attempt at Stripe, its response's body
// included, by timeout, and sends each request body with its length.
//
// The bound is the transport's, not http.Client.Timeout: a client with a
// Timeout whose transport is not an *http.Transport itself cancels each
// request by the oldest of net/http's ways, a goroutine, a timer and two
// channels per request. A deadline on the request's context is the way
// net/http's own transport takes.
//
// stripe-go hands net/http a form body as a reader that does not say how
// long it is, and net/http sends such a body chunked: the headers, the
// body and the closing chunk in three writes to the socket, three reads at
// Stripe's end, where a body of known length goes out with its headers in
// one. The bodies are a few hundred bytes already in memory, so reading
// one to measure it costs less than the two system calls it saves.
type attemptTransport struct {
	*http.Transport
	timeout time.Duration
}

func (a attemptTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(req.Context(), a.timeout)
	attempt := req.WithContext(ctx) // a RoundTripper leaves its request as it was
	if req.Body != nil && req.Body != http.NoBody && req.ContentLength <= 0 {
		body, err := io.ReadAll(req.Body)
		_ = req.Body.Close() // a RoundTripper closes the body it is given
		if err != nil {
			cancel()
			return nil, fmt.Errorf("read the body of %s %s: %w", req.Method, req.URL.Path, err)
		}
		attempt = req.Clone(ctx)
		attempt.Body, attempt.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		if len(body) == 0 {
			attempt.Body = http.NoBody
		}
	}
	resp, err := a.Transport.RoundTrip(attempt)
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = cancelOnClose{resp.Body, cancel}
	return resp, nil
}

// cancelOnClose ends an attempt's deadline once its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// ChargeRequest is one charge of a customer's default source.
type ChargeRequest struct {
	Customer    string
	Amount      int64
	Currency    string
	Description string
	Metadata    map[string]string
	// IdempotencyKey makes the charge safe to repeat: Stripe returns the
	// first result for the key instead of charging again.
	IdempotencyKey string
}

// Created is a charge as Charge returns it.
type Created struct {
	ID string
	// Replayed is set when Stripe answered with the charge an earlier
	// request under the same idempotency key made (its
	// Idempotent-Replayed header), not with a new one.
	Replayed bool
	// Metadata is the charge's metadata as Stripe holds it.
	Metadata map[string]string
}

// Charge creates a charge, or, for an idempotency key Stripe has seen
// with the same parameters, returns the charge it made then. It is the
// ride's foreign state mutation.
func (g *Gateway) Charge(ctx context.Context, req ChargeRequest) (charge Created, err error) {
	defer g.record(metrics.StripeCreateCharge, time.Now(), &err)
	// The foreign state mutation's span, its Stripe key on it; the HTTP
	// exchanges under it are stripe-go's, retries included.
	ctx, span := trace.Start(ctx, "stripe charge", trace.StripeKey.String(req.IdempotencyKey))
	defer func() { trace.End(span, err) }()
	params := &stripe.ChargeParams{
		Amount:      stripe.Int64(req.Amount),
		Currency:    stripe.String(req.Currency),
		Customer:    stripe.String(req.Customer),
		Description: stripe.String(req.Description),
	}
	params.Context = ctx
	params.SetIdempotencyKey(req.IdempotencyKey)
	for k, v := range req.Metadata {
		params.AddMetadata(k, v)
	}
	// Charges.New would decode Stripe's whole charge into a stripe.Charge:
	// its payment source, outcome, refunds and every expandable field, at
	// a cost per ride near that of the HTTP exchange itself. The ride keeps
	// only the id and checks the metadata, and the client's backend decodes
	// into whatever it is given, with the same request, retries and errors
	// as Charges.New.
	var created createdCharge
	err = g.api.Charges.B.Call(http.MethodPost, "/v1/charges", g.api.Charges.Key, params, &created)
	if err != nil {
		return Created{}, classify(fmt.Sprintf("create charge (idempotency key %s)", req.IdempotencyKey), err)
	}
	charge = Created{ID: created.ID, Metadata: created.Metadata}
	if created.LastResponse != nil {
		charge.Replayed = created.LastResponse.Header.Get("Idempotent-Replayed") == "true"
	}
	return charge, nil
}

// createdCharge is what Charge reads of a created charge.
type createdCharge struct {
	stripe.APIResource
	ID       string            `json:"id"`
	Metadata map[string]string `json:"metadata"`
}

// AddMetadata adds metadata to charge id, and changes nothing else: an
// update of a charge cannot move money, so it is how facts known only
// after the charge (the ride it paid for) reach Stripe without making the
// charge's own request depend on them.
func (g *Gateway) AddMetadata(ctx context.Context, id string, metadata map[string]string) error {
	params := &stripe.ChargeParams{}
	params.Context = ctx
	for k, v := range metadata {
		params.AddMetadata(k, v)
	}
	if _, err := g.api.Charges.Update(id, params); err != nil {
		return classify("add metadata to charge "+id, err)
	}
	return nil
}

// CreateCustomer creates a customer with a payment source (a card token
// such as tok_visa). idempotencyKey keeps a repeated call from creating a
// second customer.
func (g *Gateway) CreateCustomer(ctx context.Context, email, source, idempotencyKey string) (string, error) {
	params := &stripe.CustomerParams{
		Email:  stripe.String(email),
		Source: stripe.String(source),
	}
	params.Context = ctx
	params.SetIdempotencyKey(idempotencyKey)
	customer, err := g.api.Customers.New(params)
	if err != nil {
		return "", classify("create customer "+email, err)
	}
	return customer.ID, nil
}

// classify wraps err in the outcome the caller has to act on.
func classify(op string, err error) error {
	var stripeErr *stripe.Error
	if !errors.As(err, &stripeErr) {
		// Connection refused, reset, timeout, cancelled context: the
		// request may or may not have reached Stripe.
		return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
	}
	switch {
	case stripeErr.HTTPStatusCode == http.StatusInternalServerError:
		return fmt.Errorf("%s: %w: %w: %w", op, ErrUnavailable, ErrOutcomeUnknown, err)
	case stripeErr.Type == stripe.ErrorTypeCard:
		return fmt.Errorf("%s: %w", op, &DeclinedError{Message: stripeErr.Msg, Code: string(stripeErr.Code)})
	case stripeErr.HTTPStatusCode >= 500,
		stripeErr.HTTPStatusCode == http.StatusTooManyRequests,
		stripeErr.HTTPStatusCode == http.StatusConflict,
		// A bad or revoked API key is our configuration, not the
		// customer's request: once it is fixed a retry must go through,
		// so nothing final may be recorded.
		stripeErr.HTTPStatusCode == http.StatusUnauthorized,
		stripeErr.HTTPStatusCode == http.StatusForbidden,
		stripeErr.Type == stripe.ErrorTypeAPI:
		return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
	case stripeErr.Type == stripe.ErrorTypeIdempotency:
		return fmt.Errorf("%s: %w: %w", op, ErrKeyConflict, &RejectedError{Message: stripeErr.Msg, Status: stripeErr.HTTPStatusCode})
	default:
		return fmt.Errorf("%s: %w", op, &RejectedError{Message: stripeErr.Msg, Status: stripeErr.HTTPStatusCode})
	}
}

// CustomerExists reports whether Stripe knows the customer. A customer
// that was deleted, or that lived in another Stripe account (or in an
// earlier run of the in-memory fake), does not exist.
func (g *Gateway) CustomerExists(ctx context.Context, id string) (bool, error) {
	params := &stripe.CustomerParams{}
	params.Context = ctx
	c, err := g.api.Customers.Get(id, params)
	var stripeErr *stripe.Error
	if errors.As(err, &stripeErr) && stripeErr.HTTPStatusCode == http.StatusNotFound {
		return false, nil
	}
	if err != nil {
		return false, classify("get customer "+id, err)
	}
	return !c.Deleted, nil
}

// FindCharge looks for a successful charge of customer, created at or
// after since, whose metadata[metadataKey] is value. It is how a request
// asks Stripe whether an earlier attempt charged, once Stripe may have
// forgotten the attempt's idempotency key: the metadata names our request,
// so it identifies the charge whatever key it was made with.
func (g *Gateway) FindCharge(ctx context.Context, customer, metadataKey, value string, since time.Time) (chargeID string, found bool, err error) {
	defer g.record(metrics.StripeListCharges, time.Now(), &err)
	err = g.eachCharge(ctx, customer, since, func(c *stripe.Charge) bool {
		if c.Status == stripe.ChargeStatusSucceeded && c.Metadata[metadataKey] == value {
			chargeID, found = c.ID, true
		}
		return !found
	})
	return chargeID, found, err
}

// ChargesFor returns every charge of customer, created at or after since,
// whose metadata[metadataKey] is value, in any status: what Stripe holds
// for one request, as a person settling it needs to see it.
func (g *Gateway) ChargesFor(ctx context.Context, customer, metadataKey, value string, since time.Time) (charges []*Charge, err error) {
	defer g.record(metrics.StripeListCharges, time.Now(), &err)
	err = g.eachCharge(ctx, customer, since, func(c *stripe.Charge) bool {
		if c.Metadata[metadataKey] == value {
			charges = append(charges, fromStripe(c))
		}
		return true
	})
	return charges, err
}

// eachCharge hands fn the charges of customer created at or after since,
// page by page, until fn returns false.
func (g *Gateway) eachCharge(ctx context.Context, customer string, since time.Time, fn func(*stripe.Charge) bool) error {
	params := &stripe.ChargeListParams{
		Customer:     stripe.String(customer),
		CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: since.Unix()},
	}
	params.Limit = stripe.Int64(100)
	return g.walkCharges(ctx, "list charges of "+customer, params, fn)
}

// walkCharges hands fn the charges params lists, page by page, until fn
// returns false; what names the listing in its error.
func (g *Gateway) walkCharges(ctx context.Context, what string, params *stripe.ChargeListParams, fn func(*stripe.Charge) bool) error {
	params.Context = ctx
	iter := g.api.Charges.List(params)
	for iter.Next() {
		if !fn(iter.Charge()) {
			return nil
		}
	}
	if err := iter.Err(); err != nil {
		return classify(what, err)
	}
	return nil
}

// TookMoney reports whether c moved money that was kept: succeeded and
// not fully refunded. A declined charge is kept by Stripe as a failed
// charge object but moved no money; a fully refunded one gave it back,
// which is how a person settles a double charge, so reconciliation does
// not report a settled one forever.
func (c *Charge) TookMoney() bool {
	return c.Status == string(stripe.ChargeStatusSucceeded) && !c.Refunded
}

// record counts and times a call to Stripe that started at start and
// ended with *err.
func (g *Gateway) record(op metrics.StripeOperation, start time.Time, err *error) {
	g.metrics.Call(op, OutcomeOf(*err), start)
}

// Charge is a charge as Stripe reports it.
type Charge struct {
	ID       string
	Amount   int64
	Currency string
	Customer string // empty for a charge of a bare card
	Created  time.Time
	Metadata map[string]string
	Status   string // succeeded, pending or failed
	Refunded bool   // fully refunded
	// FailureMessage is why a failed charge failed, as Stripe tells the
	// customer ("Your card was declined.").
	FailureMessage string
}

// Declined reports whether c is a card's refusal: Stripe keeps a failed
// charge for each.
func (c *Charge) Declined() bool {
	return c.Status == string(stripe.ChargeStatusFailed)
}

func fromStripe(c *stripe.Charge) *Charge {
	out := &Charge{
		ID:       c.ID,
		Amount:   c.Amount,
		Currency: string(c.Currency),
		Created:  time.Unix(c.Created, 0),
		Metadata: c.Metadata,
		Status:   string(c.Status),
		Refunded: c.Refunded,

		FailureMessage: c.FailureMessage,
	}
	if c.Customer != nil {
		out.Customer = c.Customer.ID
	}
	return out
}

// ListCharges returns every charge created in [since, until], of every
// customer and in every status, asking Stripe for pageSize (1-100) at a
// time.
func (g *Gateway) ListCharges(ctx context.Context, since, until time.Time, pageSize int64) ([]*Charge, error) {
	params := &stripe.ChargeListParams{
		CreatedRange: &stripe.RangeQueryParams{
			GreaterThanOrEqual: since.Unix(),
			LesserThanOrEqual:  until.Unix(),
		},
	}
	params.Limit = stripe.Int64(pageSize)
	var charges []*Charge
	err := g.walkCharges(ctx, "list charges", params, func(c *stripe.Charge) bool {
		charges = append(charges, fromStripe(c))
		return true
	})
	if err != nil {
		return nil, err
	}
	return charges, nil
}

// GetCharge returns the charge id; found is false when Stripe has no such
// charge.
func (g *Gateway) GetCharge(ctx context.Context, id string) (c *Charge, found bool, err error) {
	params := &stripe.ChargeParams{}
	params.Context = ctx
	sc, err := g.api.Charges.Get(id, params)
	var stripeErr *stripe.Error
	if errors.As(err, &stripeErr) && stripeErr.HTTPStatusCode == http.StatusNotFound {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, classify("get charge "+id, err)
	}
	return fromStripe(sc), true, nil
}
