package docs_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
)

// TestSchemas checks what OpenAPI validators let through but a client
// generator trips on.
func TestSchemas(t *testing.T) {
	t.Parallel()

	// A required property the schema does not define: generators make it
	// an untyped field, or refuse. The schema of /openapi.yaml itself
	// used to require openapi, info and paths without defining them.
	t.Run("RequireOnlyPropertiesTheyDefine", func(t *testing.T) {
		t.Parallel()
		doc := load(t)
		var problems []string
		seen := map[*openapi3.Schema]bool{}
		var walk func(where string, ref *openapi3.SchemaRef)
		walk = func(where string, ref *openapi3.SchemaRef) {
			if ref == nil || ref.Value == nil || seen[ref.Value] {
				return
			}
			s := ref.Value
			seen[s] = true
			// With allOf, anyOf or oneOf the properties may come from the
			// parts.
			if len(s.AllOf)+len(s.AnyOf)+len(s.OneOf) == 0 {
				for _, name := range s.Required {
					if _, ok := s.Properties[name]; !ok {
						problems = append(problems, fmt.Sprintf("%s requires %q but does not define it", where, name))
					}
				}
			}
			for name, p := range s.Properties {
				walk(where+"."+name, p)
			}
			walk(where+"[]", s.Items)
			for i, parts := range []openapi3.SchemaRefs{s.AllOf, s.AnyOf, s.OneOf} {
				for j, p := range parts {
					walk(fmt.Sprintf("%s/%d.%d", where, i, j), p)
				}
			}
			if s.AdditionalProperties.Schema != nil {
				walk(where+"{}", s.AdditionalProperties.Schema)
			}
		}
		for name, s := range doc.Components.Schemas {
			walk("#/components/schemas/"+name, s)
		}
		content := func(where string, c openapi3.Content) {
			for mediaType, mt := range c {
				walk(where+" "+mediaType, mt.Schema)
			}
		}
		for name, r := range doc.Components.Responses {
			content("#/components/responses/"+name, r.Value.Content)
		}
		for path, item := range doc.Paths.Map() {
			for method, op := range item.Operations() {
				where := method + " " + path
				if op.RequestBody != nil {
					content(where+" request", op.RequestBody.Value.Content)
				}
				for status, r := range op.Responses.Map() {
					content(where+" "+status, r.Value.Content)
				}
			}
		}
		slices.Sort(problems)
		require.Empty(t, problems)
		require.NotEmpty(t, seen)
	})
}
