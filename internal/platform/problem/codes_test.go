package problem_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/rocketrides/rocketrides/internal/platform/problem"
	"github.com/rocketrides/rocketrides/internal/platform/project"
)

// TestCodesAreTheCodesUsed: Codes, which docs/errors.md is written from,
// lists every code a problem.New in the code answers with and no other, and
// docs/openapi.yaml's ProblemCode lists the same.
func TestCodesAreTheCodesUsed(t *testing.T) {
	t.Parallel()
	root, err := project.Root()
	require.NoError(t, err)

	used := map[string]string{} // code -> where
	for _, dir := range []string{"cmd", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(file, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) < 2 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "New" || !isIdent(sel.X, "problem") {
					return true
				}
				lit, ok := call.Args[1].(*ast.BasicLit)
				require.True(t, ok, "%s: problem.New's code is not a string literal, so no test can list it", path)
				code, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				used[code] = path
				return true
			})
			return nil
		})
		require.NoError(t, err)
	}

	var listed []string
	for _, c := range problem.Codes {
		listed = append(listed, c.Code)
		require.NotEmpty(t, c.Statuses, c.Code)
		require.NotEmpty(t, c.Meaning, c.Code)
		_, ok := used[c.Code]
		require.True(t, ok, "problem.Codes lists %s, which no problem.New uses: remove it", c.Code)
	}
	for code, where := range used {
		require.Contains(t, listed, code, "%s answers with %s, which problem.Codes does not list: add it, then make docs", where, code)
	}

	spec, err := os.ReadFile(filepath.Join(root, "docs", "openapi.yaml"))
	require.NoError(t, err)
	var doc struct {
		Components struct {
			Schemas struct {
				ProblemCode struct {
					Enum []string `yaml:"enum"`
				} `yaml:"ProblemCode"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(spec, &doc))
	require.ElementsMatch(t, listed, doc.Components.Schemas.ProblemCode.Enum, "docs/openapi.yaml's ProblemCode and problem.Codes")
	require.Len(t, slices.Compact(slices.Sorted(slices.Values(listed))), len(listed), "a code is listed twice")
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}
