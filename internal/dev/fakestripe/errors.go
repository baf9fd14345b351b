package fakestripe

import (
	"fmt"
	"net/http"
)

// Stripe's error types, the "type" of the error envelope. stripe-go turns
// each into its own typed error, so clients branch on them.
const (
	errorTypeAPI            = "api_error"
	errorTypeCard           = "card_error"
	errorTypeIdempotency    = "idempotency_error"
	errorTypeInvalidRequest = "invalid_request_error"
)

// apiError is an error as Stripe renders it:
// {"error":{"type","code","message","param",...}} with an HTTP status.
type apiError struct {
	status int

	Type        string `json:"type"`
	Code        string `json:"code,omitempty"`
	DeclineCode string `json:"decline_code,omitempty"`
	Message     string `json:"message"`
	Param       string `json:"param,omitempty"`
	// Charge is the ID of the failed charge a card error left behind, so a
	// client can look it up as it would at Stripe.
	Charge string `json:"charge,omitempty"`
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.status, e.Type, e.Message)
}

// envelope wraps the error in the object Stripe sends.
func (e *apiError) envelope() any {
	return struct {
		Error *apiError `json:"error"`
	}{e}
}

func invalidRequest(status int, code, param, format string, args ...any) *apiError {
	return &apiError{
		status:  status,
		Type:    errorTypeInvalidRequest,
		Code:    code,
		Param:   param,
		Message: fmt.Sprintf(format, args...),
	}
}

func missingParam(param string) *apiError {
	return invalidRequest(http.StatusBadRequest, "parameter_missing", param, "Missing required param: %s.", param)
}

func invalidInteger(param, value string) *apiError {
	return invalidRequest(http.StatusBadRequest, "parameter_invalid_integer", param, "Invalid integer: %s", value)
}

// noSuch is Stripe's 404 (or 400, when the missing object is named by a
// parameter rather than the URL) for an object that does not exist.
func noSuch(status int, param, object, id string) *apiError {
	return invalidRequest(status, "resource_missing", param, "No such %s: '%s'", object, id)
}

func internalError(format string, args ...any) *apiError {
	return &apiError{
		status:  http.StatusInternalServerError,
		Type:    errorTypeAPI,
		Message: fmt.Sprintf(format, args...),
	}
}

func cardDeclined(chargeID string) *apiError {
	return &apiError{
		status:      http.StatusPaymentRequired,
		Type:        errorTypeCard,
		Code:        "card_declined",
		DeclineCode: "generic_decline",
		Message:     "Your card was declined.",
		Charge:      chargeID,
	}
}
