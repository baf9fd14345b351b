package docs_test

import (
	"go/ast"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/tools/go/packages"
	"golang.org/x/tools/go/types/typeutil"
)

// mechanism are the packages whose first-reading files are the mechanism:
// the claim, a phase and unlock (idem), the DAG (rides), the completer's
// selection and the reaper's delete (idem, run by completer and reaper).
var mechanism = []string{"internal/idem", "internal/rides", "internal/completer", "internal/reaper"}

// TestFirstReadingIsClosed holds the first reading to what it promises: a
// learner who follows a call from a first-reading file of the mechanism
// lands in another first-reading file, or in something the calling file's
// header names as second reading ("Left to a second reading: ... (claimFast,
// fastpath.go)"). A call that lands in a second-reading file unnamed fails
// here: either the call moves, the callee moves into a first-reading file,
// or the header says where the learner is going.
//
// A callee is named by its name where it is the caller's own package's,
// and otherwise by its receiver's type or its package (Store.Phase,
// payment.OutcomeOf). Calls of function values (a phase function) are not
// followed: nothing but running them says where they go.
func TestFirstReadingIsClosed(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	first := firstReading(t)

	var patterns []string
	for _, dir := range mechanism {
		patterns = append(patterns, "./"+dir)
	}
	pkgs, err := packages.Load(&packages.Config{
		Dir:  root,
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo,
	}, patterns...)
	require.NoError(t, err)
	require.Equal(t, 0, packages.PrintErrors(pkgs), "the mechanism's packages type-check")

	checked := 0
	for _, pkg := range pkgs {
		for _, file := range pkg.Syntax {
			path := rel(root, pkg.Fset.Position(file.Package).Filename)
			if !first[path] || filepath.Base(path) == "doc.go" {
				continue
			}
			checked++
			header := headerOf(file)
			ast.Inspect(file, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				fn, ok := typeutil.Callee(pkg.TypesInfo, call).(*types.Func)
				if !ok || fn.Pkg() == nil {
					return true // a builtin, a conversion, or a function value
				}
				at := rel(root, pkg.Fset.Position(fn.Pos()).Filename)
				if at == "" || first[at] || strings.HasSuffix(at, "_test.go") {
					return true // outside the project, or in the first reading
				}
				if names := namesOf(fn, pkg.Types); !namedIn(header, names) {
					t.Errorf("%s: %s calls %s, in %s, a second-reading file; "+
						"its header names it as %s nowhere",
						pkg.Fset.Position(call.Pos()), path, fn.FullName(), at, strings.Join(names, " or "))
				}
				return true
			})
		}
	}
	require.NotZero(t, checked, "the tour's first reading has files of the mechanism")
	t.Logf("checked the calls of %d first-reading files", checked)
}

// firstReading is the set of files, relative to the project's root, that
// docs/tour.md links in its first reading.
func firstReading(t *testing.T) map[string]bool {
	t.Helper()
	tour, err := os.ReadFile("tour.md")
	require.NoError(t, err)
	text, _, found := strings.Cut(string(tour), "## Second reading")
	require.True(t, found, "tour.md has a second-reading section")
	files := map[string]bool{}
	for _, link := range regexp.MustCompile(`\]\(\.\./([^)#]+\.go)\)`).FindAllStringSubmatch(text, -1) {
		files[link[1]] = true
	}
	return files
}

// rel is path relative to root, slash-separated, or "" when path is not
// under root (the standard library, a module dependency).
func rel(root, path string) string {
	r, err := filepath.Rel(root, path)
	if err != nil || strings.HasPrefix(r, "..") || filepath.IsAbs(r) {
		return ""
	}
	return filepath.ToSlash(r)
}

// headerOf is the comment text of file above its package clause: what a
// first-reading file says it leaves to a second reading.
func headerOf(file *ast.File) string {
	var b strings.Builder
	for _, group := range file.Comments {
		if group.End() < file.Package {
			b.WriteString(group.Text())
			b.WriteString("\n")
		}
	}
	return b.String()
}

// namesOf are the ways a header may name fn for a caller in package from:
// by its receiver's type (Store.Phase) or its package (payment.OutcomeOf),
// or, in the caller's own package, by its name alone.
func namesOf(fn *types.Func, from *types.Package) []string {
	var names []string
	if recv := fn.Signature().Recv(); recv != nil {
		t := recv.Type()
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		if named, ok := t.(*types.Named); ok {
			names = append(names, named.Obj().Name()+"."+fn.Name())
		}
	} else {
		names = append(names, fn.Pkg().Name()+"."+fn.Name())
	}
	if fn.Pkg() == from {
		names = append(names, fn.Name())
	}
	return names
}

// namedIn reports whether header names one of names, as a word of its own.
func namedIn(header string, names []string) bool {
	for _, name := range names {
		if regexp.MustCompile(`(^|\W)` + regexp.QuoteMeta(name) + `($|\W)`).MatchString(header) {
			return true
		}
	}
	return false
}
