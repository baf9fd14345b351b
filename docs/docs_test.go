package docs_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/docs"
	"github.com/rocketrides/rocketrides/internal/completer"
	"github.com/rocketrides/rocketrides/internal/reaper"
)

func load(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(docs.OpenAPI)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(loader.Context))
	return doc
}

func TestOpenAPI(t *testing.T) {
	t.Parallel()

	t.Run("IsValidOpenAPI31", func(t *testing.T) {
		t.Parallel()
		doc := load(t)
		require.Equal(t, "3.1.0", doc.OpenAPI)
		require.True(t, doc.IsOpenAPI31OrLater())
	})

	// A client generator names its methods after operationIds: every
	// operation has one, and they are unique.
	t.Run("EveryOperationHasAnOperationID", func(t *testing.T) {
		t.Parallel()
		doc := load(t)
		var ids []string
		for path, item := range doc.Paths.Map() {
			for method, op := range item.Operations() {
				require.NotEmpty(t, op.OperationID, "%s %s", method, path)
				ids = append(ids, op.OperationID)
			}
		}
		slices.Sort(ids)
		require.Equal(t, len(ids), len(slices.Compact(slices.Clone(ids))), "operationIds: %v", ids)
	})

	// The contract promises a client that gives up after a 5xx that the
	// server settles its ride in a stated time; the time is the
	// completer's defaults, and the text must say so.
	t.Run("StatesTheCompletersPromise", func(t *testing.T) {
		t.Parallel()
		doc := load(t)
		promise := fmt.Sprintf("within %d minutes of the last attempt", int(completer.DefaultSettleWithin.Minutes()))
		require.Contains(t, strings.Join(strings.Fields(doc.Info.Description), " "), promise)
		for _, setting := range []string{"COMPLETER_MIN_AGE", "COMPLETER_RETRY_INTERVAL"} {
			require.Contains(t, doc.Info.Description, setting, "the promise names what it is derived from")
		}
	})

	// The IETF Idempotency-Key draft asks an API to publish how long a
	// key lives; the figures are the reaper's defaults.
	t.Run("StatesTheKeyLifetime", func(t *testing.T) {
		t.Parallel()
		doc := load(t)
		text := strings.Join(strings.Fields(doc.Info.Description), " ")
		require.Contains(t, text, fmt.Sprintf("for %d hours after it was first used (the reaper's `REAPER_MAX_AGE`)",
			int(reaper.DefaultMaxAge.Hours())))
		require.Contains(t, text, fmt.Sprintf("for %d days after the key was first used (`REAPED_KEY_RETENTION`)",
			int(reaper.DefaultRetainReaped.Hours()/24)))
	})

	// The requests the tests make exercise most problem codes, and
	// apitest validates their responses against the document; this
	// covers the rest (a code only a rare failure produces) by reading
	// every problem.New in the code.
	t.Run("EnumeratesEveryProblemCode", func(t *testing.T) {
		t.Parallel()
		doc := load(t)
		var documented []string
		for _, v := range doc.Components.Schemas["ProblemCode"].Value.Enum {
			documented = append(documented, v.(string))
		}
		slices.Sort(documented)
		codes := problemCodes(t, "../internal")
		require.Equal(t, documented, codes,
			"the ProblemCode enum of docs/openapi.yaml and the codes passed to problem.New in internal/ differ")
	})

	// A client generator builds a HEAD call from the HEAD operation
	// alone: without its GET's parameters it cannot send them.
	t.Run("HeadOperationsCarryTheirGetsParameters", func(t *testing.T) {
		t.Parallel()
		doc := load(t)
		for path, item := range doc.Paths.Map() {
			if item.Head == nil || item.Get == nil {
				continue
			}
			require.Equal(t, parameters(item.Get), parameters(item.Head), "HEAD %s", path)
		}
	})

	// Every route passes the same body checks (64 KiB, no
	// Content-Encoding), the ride routes the rate limits, and
	// POST /rides, the one that reads its body, may find it stalled.
	t.Run("DocumentsTheEdgesAnswersWhereTheyOccur", func(t *testing.T) {
		t.Parallel()
		doc := load(t)
		for path, item := range doc.Paths.Map() {
			for method, op := range item.Operations() {
				where := method + " " + path
				for _, status := range []string{"413", "415"} {
					require.NotNil(t, op.Responses.Value(status), "%s does not document %s", where, status)
				}
				if strings.HasPrefix(path, "/rides") {
					require.NotNil(t, op.Responses.Value("429"), "%s does not document 429", where)
				}
				require.Equal(t, method == "POST", op.Responses.Value("408") != nil, "%s: 408 is POST /rides's", where)
			}
		}
	})

	// A fuzzer sent ids past int64, which the API can only refuse.
	t.Run("IdsHaveTheirInt64Maximum", func(t *testing.T) {
		t.Parallel()
		doc := load(t)
		var ids []*openapi3.Schema
		for _, item := range doc.Paths.Map() {
			for _, op := range item.Operations() {
				for _, p := range op.Parameters {
					if name := p.Value.Name; name == "id" || name == "starting_after" {
						ids = append(ids, p.Value.Schema.Value)
					}
				}
			}
		}
		ids = append(ids, doc.Components.Schemas["Ride"].Value.Properties["id"].Value,
			doc.Components.Schemas["Problem"].Value.Properties["ride_id"].Value)
		require.Len(t, ids, 6, "id of GET and HEAD /rides/{id}, starting_after of GET and HEAD /rides, Ride.id, ride_id")
		for _, s := range ids {
			require.Equal(t, "int64", s.Format)
			require.NotNil(t, s.Max)
			require.Equal(t, float64(math.MaxInt64), *s.Max)
		}
	})

	// The retry protocol lists every answer a client retries with the
	// same key.
	t.Run("TheRetryProtocolListsEveryRetryableAnswer", func(t *testing.T) {
		t.Parallel()
		doc := load(t)
		text := strings.Join(strings.Fields(doc.Info.Description), " ")
		protocol := text[strings.Index(text, "**The retry protocol.**"):strings.Index(text, "Wait at least")]
		for _, want := range []string{"`409 request_in_progress`", "`503`", "`500 internal_error`", "`408 request_timeout`", "`429 rate_limited`"} {
			require.Contains(t, protocol, want)
		}
	})
}

// parameters are op's parameters as "in name", sorted.
func parameters(op *openapi3.Operation) []string {
	var ps []string
	for _, p := range op.Parameters {
		ps = append(ps, p.Value.In+" "+p.Value.Name)
	}
	slices.Sort(ps)
	return ps
}

// problemCodes returns the code of every problem.New(status, "code", ...)
// call under dir, sorted and without duplicates.
func problemCodes(t *testing.T, dir string) []string {
	t.Helper()
	var codes []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && d.Name() == "testdata":
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "New" {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "problem" {
				return true
			}
			lit, ok := call.Args[1].(*ast.BasicLit)
			require.True(t, ok && lit.Kind == token.STRING,
				"%s: problem.New's code must be a string literal, so that it can be documented", fset.Position(call.Pos()))
			code, err := strconv.Unquote(lit.Value)
			require.NoError(t, err)
			codes = append(codes, code)
			return true
		})
		return nil
	})
	require.NoError(t, err)
	slices.Sort(codes)
	return slices.Compact(codes)
}
