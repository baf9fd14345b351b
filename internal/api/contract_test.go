package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/docs"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

// TestIdempotencyKeyContract: the Idempotency-Key schema of
// docs/openapi.yaml used to admit keys the API refuses (a leading ", all
// spaces, spaces at the ends around too short a key); a client that
// checks its key against the document must find what the API finds.
func TestIdempotencyKeyContract(t *testing.T) {
	t.Parallel()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(docs.OpenAPI)
	require.NoError(t, err)
	schema := doc.Components.Parameters["IdempotencyKey"].Value.Schema.Value
	b := apitest.New(t, apitest.Options{})

	a := func(n int) string { return strings.Repeat("a", n) }
	for _, key := range []string{
		"6f1c2a0e-2a57-4d53-9c6b-0a6f0f1d2b11",
		a(20), a(19), a(255), a(256),
		a(10) + "          " + a(10), // spaces inside
		strings.Repeat(" ", 20),      // all spaces
		" " + a(19) + " ",            // too short without its ends
		" " + a(20),                  // long enough without them
		a(25) + `"`,                  // a quote, but not first
		`"` + a(25),                  // a leading quote, never closed
		`"` + a(25) + `"`,            // an RFC 8941 string
		`"` + a(19) + `"`,
		`"` + a(255) + `"`,
		`"` + a(256) + `"`,
		`"` + `a\"b\\c` + a(20) + `"`, // its two escapes
		`"` + `a\nb` + a(20) + `"`,    // any other is none
		`"` + `ab"cd` + a(20) + `"`,   // a quote unescaped
		`"  ` + a(18) + `  "`,         // spaces are kept inside quotes
		`"` + a(20) + `"x`,
		`""`,
		strings.Repeat("é", 20),
		a(10) + "\t" + a(10),
	} {
		resp := b.Do(t, http.MethodPost, "/rides", "", "Authorization", "Bearer "+b.Token, "Idempotency-Key", key)
		// Nothing in the body: a key the API accepts meets 422
		// invalid_params next, before it is used.
		accepted := resp.Status != http.StatusBadRequest
		require.Contains(t, []int{http.StatusBadRequest, http.StatusUnprocessableEntity}, resp.Status, "%q: %s", key, resp.Body)
		// HTTP strips spaces at a field value's ends: what the API reads
		// is the trimmed value, and only it is a value the schema may
		// admit.
		value := strings.Trim(key, " \t")
		require.Equal(t, accepted, schema.VisitJSON(value) == nil, "%q: the API accepts it: %t", key, accepted)
		if value != key {
			require.Error(t, schema.VisitJSON(key), "%q has spaces at its ends", key)
		}
	}
	require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys`), "no key was used")
}
