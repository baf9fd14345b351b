package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/docs"
	"github.com/rocketrides/rocketrides/internal/platform/problem"
)

// contract is docs/openapi.yaml, loaded once for every stack. Loading
// validates the document itself (OpenAPI 3.1, its schemas under JSON
// Schema 2020-12, its examples against their schemas).
var contract = sync.OnceValues(func() (*contractDoc, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(docs.OpenAPI)
	if err != nil {
		return nil, fmt.Errorf("load docs/openapi.yaml: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("docs/openapi.yaml is not a valid OpenAPI document: %w", err)
	}
	// Stacks listen on random ports, not on the servers the document
	// names; without servers the router matches any host.
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route docs/openapi.yaml: %w", err)
	}
	return &contractDoc{doc: doc, router: router}, nil
})

type contractDoc struct {
	doc    *openapi3.T
	router routers.Router
}

var contractOptions = &openapi3filter.Options{
	// A status the document does not list for the operation fails: a
	// client generated from it would not expect it.
	IncludeResponseStatus: true,
	AuthenticationFunc:    checkBearer,
}

// checkBearer stands in for the API's authentication during validation:
// the document's only scheme is a bearer token, and a request the API
// accepted must have sent one.
func checkBearer(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	scheme := in.SecurityScheme
	if scheme.Type != "http" || !strings.EqualFold(scheme.Scheme, "bearer") {
		return in.NewError(fmt.Errorf("security scheme %q is not checked by apitest", in.SecuritySchemeName))
	}
	auth := in.RequestValidationInput.Request.Header.Get("Authorization")
	if kind, token, ok := strings.Cut(auth, " "); !ok || !strings.EqualFold(kind, "Bearer") || token == "" {
		return in.NewError(errors.New("no bearer token"))
	}
	return nil
}

// checkContract validates an exchange with the API against
// docs/openapi.yaml, so that the document cannot drift from the code.
// The response is always validated. The request only when the API
// accepted it (2xx): tests send invalid requests on purpose, and what
// the API answers them is checked through the response.
func checkContract(t testing.TB, req *http.Request, body []byte, resp *Response) {
	t.Helper()
	c, err := contract()
	require.NoError(t, err)
	ctx := context.Background()
	where := fmt.Sprintf("%s %s answered %d", req.Method, req.URL.RequestURI(), resp.Status)

	route, pathParams, err := c.router.FindRoute(req)
	if err != nil {
		// Not an operation of the document: the API must answer as it
		// does for any unknown endpoint.
		require.Contains(t, []int{http.StatusNotFound, http.StatusMethodNotAllowed}, resp.Status,
			"%s, but docs/openapi.yaml does not describe it: %v", where, err)
		requireProblem(t, c.doc, where, resp)
		return
	}
	reqInput := &openapi3filter.RequestValidationInput{
		Request:    req,
		PathParams: pathParams,
		Route:      route,
		Options:    contractOptions,
	}
	if resp.Status >= 200 && resp.Status < 300 {
		req.Body = io.NopCloser(bytes.NewReader(body))
		require.NoError(t, openapi3filter.ValidateRequest(ctx, reqInput),
			"%s, but the request does not match docs/openapi.yaml", where)
	}
	require.NoError(t, openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
		RequestValidationInput: reqInput,
		Status:                 resp.Status,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(resp.Body)),
		Options:                contractOptions,
	}), "%s: the response does not match docs/openapi.yaml; body: %s", where, resp.Body)
}

// requireProblem checks that resp is a problem document as the
// document's Problem schema describes it.
func requireProblem(t testing.TB, doc *openapi3.T, where string, resp *Response) {
	t.Helper()
	require.Equal(t, problem.ContentType, resp.Header.Get("Content-Type"), where)
	require.Contains(t, []string{"true", "false"}, resp.Header.Get(problem.ShouldRetryHeader),
		"%s: every error answer says whether to retry it", where)
	var value any
	require.NoError(t, json.Unmarshal(resp.Body, &value), "%s: %s", where, resp.Body)
	schema := doc.Components.Schemas["Problem"]
	require.NotNil(t, schema, "docs/openapi.yaml has no Problem schema")
	require.NoError(t, schema.Value.VisitJSON(value, openapi3.EnableJSONSchema2020()),
		"%s: the body is not a Problem as docs/openapi.yaml describes it: %s", where, resp.Body)
}
