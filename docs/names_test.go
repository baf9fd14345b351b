package docs_test

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// The documents a reader studies: what they name in code form must exist.
var studied = []string{"README.md", "docs/*.md"}

// notInTree are the names the documents give in code form that are
// deliberately not in the tree, each with why. Keep it short.
var notInTree = map[string]string{
	"internal/tip": "docs/architecture.md walks through adding a tip endpoint: the package it would create",
	// Span attributes, in OpenTelemetry's dotted form (trace.Outcome,
	// trace.UserID).
	"rocketrides.claim.outcome": "docs/tracing.md: a span attribute's name",
	"user.id":                   "docs/tracing.md: a span attribute's name",
}

// TestDocsNameWhatExists reads README.md and docs/*.md and checks that
// what they name in code form is still there: a Go identifier
// (`idem.Tx`, `request.run`, `idem.Store.PhaseThen`, `claimExisting`) or a
// name of the TypeScript client's source (`storageJournal`), a test
// (`TestStore/FencesOffRequestWhoseLockWasTakenOver`, or a pattern such
// as `TestCreateRide/ResumesFrom*`), a path of the repository
// (`internal/idem`, `cmd/{chaos,bench}`, `docs/failures.md`), a file
// (`request.go`), a make target (`make bench`) and a relative link with
// its anchor. A rename that leaves a document behind fails here, naming
// the document, the line and the name.
//
// A code span counts as a Go identifier only when it is one: dotted
// identifiers without underscores (`rides.idempotency_key_id` is a
// column), or a single identifier in mixed caps (`PhaseThen`,
// `rideByKey`). SQL and commands have spaces, HTTP paths slashes, and
// columns, JSON fields and environment variables underscores or capitals
// only, so none of them is taken for Go. A name from another module
// (`pgx.QueryTracer`) is taken on trust when the code imports its
// package.
func TestDocsNameWhatExists(t *testing.T) {
	t.Parallel()
	tr := loadTree(t, "..")
	var files []string
	for _, pattern := range studied {
		matches, err := filepath.Glob(filepath.Join("..", pattern))
		require.NoError(t, err)
		files = append(files, matches...)
	}
	require.NotEmpty(t, files)
	for _, file := range files {
		name, err := filepath.Rel("..", file)
		require.NoError(t, err)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			text, err := os.ReadFile(file)
			require.NoError(t, err)
			for _, problem := range tr.problems(name, string(text)) {
				t.Error(problem)
			}
		})
	}

	// The check itself: a document naming what is gone is caught, line by
	// line, and what is not Go is left alone.
	t.Run("CatchesDrift", func(t *testing.T) {
		t.Parallel()
		doc := strings.Join([]string{
			"The check is `tree.check`, not `tree.checks`.",                                   // 1
			"`docs.OpenAPI` and `docs.Failures`, not `docs.NoSuch`.",                          // 2
			"Shown by `TestDocsNameWhatExists/CatchesDrift` and",                              // 3
			"`TestDocsNameWhatExists/NoSuch`, `TestOpenAPI/*Promise`, `TestNoSuch`.",          // 4
			"See `docs/names_test.go`, `docs/nosuch`, `cmd/{api,nosuch}` and `nosuch.go`.",    // 5
			"Run `make test` or `make nosuch`; see [it](failures.md#nosuch).",                 // 6
			"`SELECT … FOR UPDATE`, `GET /rides/{id}`, `REAPER_MAX_AGE`, `ride_id`,",          // 7
			"`rides.idempotency_key_id`, `rocket-rides-<key id>`, `pending`, `0`, `x.Valuer`", // 8
			"`loadTree`, `storageJournal` and `loadTrees`.",                                   // 9
			"```sh",
			"go run ./cmd/bench -only new", // 11
			"go run ./cmd/nosuch",          // 12
			"```",
		}, "\n")
		got := tr.problems("docs/drift.md", doc)
		want := []string{
			"docs/drift.md:1: `tree.checks`: type tree has no method or field checks",
			"docs/drift.md:2: `docs.NoSuch`: package docs declares no NoSuch",
			"docs/drift.md:4: `TestDocsNameWhatExists/NoSuch`: TestDocsNameWhatExists has no subtest named NoSuch",
			"docs/drift.md:4: `TestNoSuch`: no test of the tree has this name",
			"docs/drift.md:5: `docs/nosuch`: docs/nosuch is not in the repository",
			"docs/drift.md:5: `cmd/{api,nosuch}`: cmd/nosuch is not in the repository",
			"docs/drift.md:5: `nosuch.go`: no file of the tree has this name",
			"docs/drift.md:6: `make nosuch`: the Makefile has no target \"nosuch\"",
			"docs/drift.md:6: `failures.md#nosuch`: docs/failures.md has no heading whose anchor is #nosuch",
			"docs/drift.md:8: `x.Valuer`: x is neither a package nor a type of the tree",
			"docs/drift.md:9: `loadTrees`: no Go or TypeScript declaration, field or file of the tree has this name",
			"docs/drift.md:12: `go run ./cmd/nosuch`: cmd/nosuch is not in the repository",
		}
		require.Equal(t, want, got)
	})
}

// problems returns what the document doc, whose text is text, names that
// the tree does not have, each as "doc:line: `name`: what is wrong".
func (tr *tree) problems(doc, text string) []string {
	var out []string
	for _, ref := range references(text) {
		if problem := tr.check(doc, ref); problem != "" {
			out = append(out, fmt.Sprintf("%s:%d: `%s`: %s", doc, ref.line, ref.text, problem))
		}
	}
	return out
}

// A reference is something a document names, on a line.
type reference struct {
	kind refKind
	text string
	line int
}

type refKind int

const (
	codeSpan   refKind = iota // `...` in prose
	linkTarget                // the target of [text](target)
	shellLine                 // a line of a ```sh block
	treeLine                  // a directory of a layout drawn in a plain ``` block
)

// references returns what a Markdown document names: its code spans, its
// links' targets, the lines of its shell blocks and the directories of
// the layout trees it draws.
func references(text string) []reference {
	lines := strings.Split(text, "\n")
	var refs []reference
	prose := make([]string, len(lines)) // the document with its fenced blocks blanked
	var fence, info string
	var parents []string // the tree block's directories by indentation
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		if fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")) {
			fence, info, parents = trimmed[:3], strings.TrimSpace(trimmed[3:]), nil
			continue
		}
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
				continue
			}
			switch info {
			case "sh", "bash", "shell":
				refs = append(refs, reference{shellLine, trimmed, i + 1})
			case "":
				if dir, ok := treeDir(line, &parents); ok {
					refs = append(refs, reference{treeLine, dir, i + 1})
				}
			}
			continue
		}
		prose[i] = line
	}

	// Code spans, which may run across lines of a paragraph but not past
	// it; then links, in the prose without its code spans.
	doc := []byte(strings.Join(prose, "\n"))
	for i := 0; i < len(doc); {
		if doc[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(doc) && doc[i+n] == '`' {
			n++
		}
		start, closing := i+n, -1
		for j := start; j < len(doc); {
			if doc[j] == '\n' && j+1 < len(doc) && doc[j+1] == '\n' {
				break
			}
			if doc[j] != '`' {
				j++
				continue
			}
			m := 0
			for j+m < len(doc) && doc[j+m] == '`' {
				m++
			}
			if m == n {
				closing = j
				break
			}
			j += m
		}
		if closing < 0 {
			i += n
			continue
		}
		content := strings.TrimSpace(strings.ReplaceAll(string(doc[start:closing]), "\n", " "))
		refs = append(refs, reference{codeSpan, content, 1 + strings.Count(string(doc[:i]), "\n")})
		for k := i; k < closing+n; k++ {
			if doc[k] != '\n' {
				doc[k] = ' '
			}
		}
		i = closing + n
	}
	for _, m := range linkRE.FindAllSubmatchIndex(doc, -1) {
		refs = append(refs, reference{linkTarget, string(doc[m[2]:m[3]]), 1 + strings.Count(string(doc[:m[0]]), "\n")})
	}
	slices.SortStableFunc(refs, func(a, b reference) int { return a.line - b.line })
	return refs
}

var linkRE = regexp.MustCompile(`\]\(([^()\s]+)\)`)

// treeDir reads a line of a drawn layout, such as README's:
//
//	internal/               the product
//	  idem/                 the idempotency-key store
//
// A line whose first word ends in a slash names a directory; an indented
// one is under the directory above it with less indentation.
func treeDir(line string, parents *[]string) (string, bool) {
	fields := strings.Fields(line)
	if len(fields) == 0 || !strings.HasSuffix(fields[0], "/") || !pathRE.MatchString(fields[0]) {
		return "", false
	}
	indent := len(line) - len(strings.TrimLeft(line, " "))
	for len(*parents) > 0 && indent <= indentOf((*parents)[len(*parents)-1]) {
		*parents = (*parents)[:len(*parents)-1]
	}
	dir := fields[0]
	if len(*parents) > 0 {
		dir = strings.TrimPrefix((*parents)[len(*parents)-1], strings.Repeat(" ", indentOf((*parents)[len(*parents)-1]))) + dir
	}
	*parents = append(*parents, strings.Repeat(" ", indent)+dir)
	return strings.TrimSuffix(dir, "/"), true
}

func indentOf(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }

var (
	// A path of the repository: words, dots, hyphens, globs and {a,b}.
	pathRE = regexp.MustCompile(`^[\w.*{},-]+(/[\w.*{},-]*)+$`)
	// The directories a repository path starts with.
	topDirs = []string{"cmd", "internal", "docs", "migrations", "tools", "scripts"}
	// A file named alone.
	fileRE   = regexp.MustCompile(`^\.?[\w-]+(\.[\w-]+)*\.(go|sql|md|ya?ml|mod|sum|example)$|^(Makefile|Dockerfile|Procfile(\.\w+)?)$`)
	testRE   = regexp.MustCompile(`^(Test|Fuzz|Example|Benchmark)[\w*…]*(/\S+)?$`)
	dottedRE = regexp.MustCompile(`^[A-Za-z]\w*(\.[A-Za-z]\w*)+(\(\))?$`)
	// A single identifier in mixed caps: PhaseThen, ErrLockLost, rideByKey.
	singleRE = regexp.MustCompile(`^([A-Z][a-z]|[a-z]+[0-9]*[A-Z])[A-Za-z0-9]*$`)
	// A name in TypeScript source: a document may name the TypeScript
	// client's functions and fields (`storageJournal`) as it names Go's.
	scriptNameRE = regexp.MustCompile(`[A-Za-z_$][\w$]*`)
	makeRE       = regexp.MustCompile(`(?:^|[;&|(]\s*)make((?:\s+[A-Z_]+=\S+)*)((?:\s+[a-z][\w-]*)*)`)
)

// check returns what is wrong with ref in the document doc, or "".
func (tr *tree) check(doc string, ref reference) string {
	s := ref.text
	if _, ok := notInTree[s]; ok {
		return ""
	}
	switch ref.kind {
	case linkTarget:
		return tr.checkLink(doc, s)
	case treeLine:
		return tr.checkPath(s)
	case shellLine:
		return tr.checkCommand(s)
	}
	switch {
	case strings.ContainsAny(s, " \t"):
		return tr.checkCommand(s)
	case testRE.MatchString(s):
		return tr.checkTest(s)
	case strings.HasPrefix(s, "./"):
		return tr.checkCommand(s)
	case strings.Contains(s, "://") || strings.HasPrefix(s, "/"):
		return "" // a URL, an HTTP path, a path outside the tree
	case pathRE.MatchString(s):
		first := strings.SplitN(s, "/", 2)[0]
		switch {
		case slices.Contains(topDirs, first):
			return tr.checkPath(s)
		case strings.Contains(first, ".") && !strings.HasPrefix(first, "."):
			// A module: riverqueue.com/riverui.
			if !strings.Contains(tr.goMod, s) {
				return "is not a module go.mod requires"
			}
		}
		return ""
	case fileRE.MatchString(s):
		if !tr.files[s] {
			return "no file of the tree has this name"
		}
		return ""
	case strings.Contains(s, "_"):
		return "" // a column, a JSON field, an environment variable
	case dottedRE.MatchString(s):
		return tr.checkGo(strings.TrimSuffix(s, "()"))
	case singleRE.MatchString(s):
		if !tr.declared[s] && !tr.used[s] && !tr.files[s] && !tr.scripted[s] {
			return "no Go or TypeScript declaration, field or file of the tree has this name"
		}
	}
	return ""
}

// checkCommand checks the make targets and the ./paths a command names.
func (tr *tree) checkCommand(s string) string {
	var problems []string
	for _, m := range makeRE.FindAllStringSubmatch(s, -1) {
		for _, target := range strings.Fields(m[2]) {
			if !tr.makeTargets[target] {
				problems = append(problems, fmt.Sprintf("the Makefile has no target %q", target))
			}
		}
	}
	for _, word := range strings.Fields(s) {
		if !strings.HasPrefix(word, "./") {
			continue
		}
		p := strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(word, "./"), "..."), "/")
		if p == "" {
			continue
		}
		if problem := tr.checkPath(p); problem != "" {
			problems = append(problems, problem)
		}
	}
	return strings.Join(problems, "; ")
}

// checkPath checks that a path of the repository exists; * and {a,b}
// must each match something.
func (tr *tree) checkPath(p string) string {
	if _, ok := notInTree[p]; ok {
		return ""
	}
	for _, alt := range expandBraces(strings.TrimSuffix(p, "/")) {
		matches, err := filepath.Glob(filepath.Join(tr.root, alt))
		if err != nil || len(matches) == 0 {
			return fmt.Sprintf("%s is not in the repository", alt)
		}
	}
	return ""
}

// expandBraces expands the first {a,b,...} of p, recursively.
func expandBraces(p string) []string {
	open := strings.Index(p, "{")
	end := strings.Index(p, "}")
	if open < 0 || end < open {
		return []string{p}
	}
	var out []string
	for _, alt := range strings.Split(p[open+1:end], ",") {
		out = append(out, expandBraces(p[:open]+alt+p[end+1:])...)
	}
	return out
}

// checkLink checks a relative link from doc and the heading its anchor
// names.
func (tr *tree) checkLink(doc, target string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	file, anchor, _ := strings.Cut(target, "#")
	file = path.Join(path.Dir(doc), file)
	if target[0] == '#' {
		file = doc
	}
	if _, err := os.Stat(filepath.Join(tr.root, file)); err != nil {
		return fmt.Sprintf("%s is not in the repository", file)
	}
	if anchor == "" {
		return ""
	}
	anchors, err := headingAnchors(filepath.Join(tr.root, file))
	if err != nil {
		return err.Error()
	}
	if !anchors[anchor] {
		return fmt.Sprintf("%s has no heading whose anchor is #%s", file, anchor)
	}
	return ""
}

// headingAnchors are the anchors of a Markdown file's headings, as GitHub
// (and the console, internal/console) make them.
func headingAnchors(file string) (map[string]bool, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	anchors := map[string]bool{}
	scanner := bufio.NewScanner(f)
	inFence := false
	for scanner.Scan() {
		line := scanner.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		anchors[anchor(strings.TrimSpace(strings.TrimLeft(line, "#")))] = true
	}
	return anchors, scanner.Err()
}

// anchor is GitHub's anchor of a heading: lowercase letters, digits,
// hyphens and underscores, spaces made hyphens, the rest dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// checkTest checks a test name or pattern as `go test -run` takes it:
// the top-level test, then each subtest level; * (and …) match anything.
func (tr *tree) checkTest(s string) string {
	parts := strings.Split(s, "/")
	top := globRE(parts[0])
	var matched []string
	for name := range tr.tests {
		if top.MatchString(name) {
			matched = append(matched, name)
		}
	}
	if len(matched) == 0 {
		return "no test of the tree has this name"
	}
	for _, level := range parts[1:] {
		re := globRE(level)
		found := false
		for _, name := range matched {
			for sub := range tr.tests[name] {
				found = found || re.MatchString(sub)
			}
		}
		if !found {
			return fmt.Sprintf("%s has no subtest named %s", strings.Join(matched, ", "), level)
		}
	}
	return ""
}

// globRE is a pattern with * or … for anything.
func globRE(pattern string) *regexp.Regexp {
	quoted := regexp.QuoteMeta(pattern)
	quoted = strings.ReplaceAll(quoted, `\*`, ".*")
	quoted = strings.ReplaceAll(quoted, "…", ".*")
	return regexp.MustCompile("^" + quoted + "$")
}

// checkGo checks a dotted Go name: pkg.Name, Type.Member, pkg.Type.Member,
// or an expression the code itself writes (`key.CreatedAt`).
func (tr *tree) checkGo(s string) string {
	if tr.selectors[s] {
		return ""
	}
	parts := strings.Split(s, ".")
	first, rest := parts[0], parts[1:]
	if pkg, ok := tr.packages[first]; ok {
		if !pkg[rest[0]] {
			return fmt.Sprintf("package %s declares no %s", first, rest[0])
		}
		if len(rest) == 1 {
			return ""
		}
		first, rest = rest[0], rest[1:]
	}
	if len(rest) != 1 {
		return "names no Go declaration of the tree"
	}
	if !tr.types[first] && tr.imported[first] {
		return "" // another module's package (pgx.QueryTracer) that the code imports: not ours to check
	}
	if !tr.types[first] {
		return fmt.Sprintf("%s is neither a package nor a type of the tree", first)
	}
	if !tr.hasMember(first, rest[0], map[string]bool{}) {
		return fmt.Sprintf("type %s has no method or field %s", first, rest[0])
	}
	return ""
}

// hasMember reports whether a type of that name has the method or field,
// its own or an embedded type's.
func (tr *tree) hasMember(typ, member string, seen map[string]bool) bool {
	if seen[typ] {
		return false
	}
	seen[typ] = true
	if tr.members[typ][member] {
		return true
	}
	for _, e := range tr.embeds[typ] {
		if tr.hasMember(e, member, seen) {
			return true
		}
	}
	return false
}

// module is the repository's module path.
const module = "github.com/rocketrides/rocketrides"

// tree is what the repository's Go code declares and uses, and its files.
type tree struct {
	root        string
	packages    map[string]map[string]bool // package name -> its top-level names
	types       map[string]bool
	members     map[string]map[string]bool // type name -> its methods and fields
	embeds      map[string][]string        // type name -> the types it embeds
	declared    map[string]bool            // every name declared anywhere
	used        map[string]bool            // every selected name and composite-literal key
	scripted    map[string]bool            // every name the TypeScript client's source (client-ts/src) writes
	selectors   map[string]bool            // every a.b and a.b.c the code writes
	imported    map[string]bool            // the names of the packages the code imports from other modules
	tests       map[string]map[string]bool // top-level test -> the subtest names it may run
	files       map[string]bool            // base names of the repository's files
	makeTargets map[string]bool
	goMod       string
}

func loadTree(t *testing.T, root string) *tree {
	t.Helper()
	tr := &tree{root: root, packages: map[string]map[string]bool{}, types: map[string]bool{},
		members: map[string]map[string]bool{}, embeds: map[string][]string{}, declared: map[string]bool{},
		used: map[string]bool{}, selectors: map[string]bool{}, imported: map[string]bool{}, tests: map[string]map[string]bool{},
		files: map[string]bool{}, makeTargets: map[string]bool{}, scripted: map[string]bool{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") && d.Name() != ".ci" || d.Name() == "node_modules"):
			return filepath.SkipDir // .git, .data
		case d.IsDir():
			return nil
		}
		tr.files[d.Name()] = true
		if strings.HasSuffix(p, ".ts") && strings.Contains(filepath.ToSlash(p), "/client-ts/src/") {
			src, err := os.ReadFile(p)
			for _, name := range scriptNameRE.FindAllString(string(src), -1) {
				tr.scripted[name] = true
			}
			return err
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		tr.addFile(f, strings.HasSuffix(p, "_test.go"))
		return nil
	})
	require.NoError(t, err)

	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	tr.goMod = string(goMod)
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	for _, line := range strings.Split(string(makefile), "\n") {
		targets, _, ok := strings.Cut(line, ":")
		if !ok || strings.HasPrefix(line, "\t") || strings.HasPrefix(line, ".") || strings.ContainsAny(targets, "=$#") ||
			strings.HasPrefix(line[len(targets):], ":=") {
			continue
		}
		for _, target := range strings.Fields(targets) {
			tr.makeTargets[target] = true
		}
	}
	return tr
}

func (tr *tree) addFile(f *ast.File, isTest bool) {
	pkg := strings.TrimSuffix(f.Name.Name, "_test")
	if tr.packages[pkg] == nil {
		tr.packages[pkg] = map[string]bool{}
	}
	declare := func(name string) {
		tr.packages[pkg][name] = true
		tr.declared[name] = true
	}
	member := func(typ, name string) {
		if tr.members[typ] == nil {
			tr.members[typ] = map[string]bool{}
		}
		tr.members[typ][name] = true
		tr.declared[name] = true
	}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if strings.HasPrefix(p, module+"/") {
			continue
		}
		name := path.Base(p)
		if strings.HasPrefix(name, "v") && strings.Trim(name[1:], "0123456789") == "" {
			name = path.Base(path.Dir(p)) // github.com/jackc/pgx/v5
		}
		if imp.Name != nil {
			name = imp.Name.Name
		}
		tr.imported[name] = true
	}
	for _, decl := range f.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			if decl.Recv != nil && len(decl.Recv.List) > 0 {
				member(typeName(decl.Recv.List[0].Type), decl.Name.Name)
				continue
			}
			declare(decl.Name.Name)
			if isTest && testRE.MatchString(decl.Name.Name) {
				tr.tests[decl.Name.Name] = subtests(decl.Body)
			}
		case *ast.GenDecl:
			for _, spec := range decl.Specs {
				switch spec := spec.(type) {
				case *ast.TypeSpec:
					declare(spec.Name.Name)
					tr.types[spec.Name.Name] = true
					tr.addMembers(spec.Name.Name, spec.Type, member)
				case *ast.ValueSpec:
					for _, n := range spec.Names {
						declare(n.Name)
					}
				}
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			tr.used[n.Sel.Name] = true
			if s, ok := selectorString(n); ok {
				tr.selectors[s] = true
			}
		case *ast.KeyValueExpr:
			if k, ok := n.Key.(*ast.Ident); ok {
				tr.used[k.Name] = true
			}
		}
		return true
	})
}

// addMembers records a type's fields, interface methods and embedded
// types.
func (tr *tree) addMembers(typ string, expr ast.Expr, member func(typ, name string)) {
	var fields *ast.FieldList
	switch e := expr.(type) {
	case *ast.StructType:
		fields = e.Fields
	case *ast.InterfaceType:
		fields = e.Methods
	default:
		return
	}
	for _, field := range fields.List {
		if len(field.Names) == 0 {
			tr.embeds[typ] = append(tr.embeds[typ], typeName(field.Type))
			member(typ, typeName(field.Type))
			continue
		}
		for _, n := range field.Names {
			member(typ, n.Name)
		}
	}
}

// typeName is the name of a receiver or embedded type: T of *T, T[P],
// pkg.T.
func typeName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return typeName(e.X)
	case *ast.IndexExpr:
		return typeName(e.X)
	case *ast.IndexListExpr:
		return typeName(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// selectorString is a.b or a.b.c, when every part is an identifier.
func selectorString(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name, true
	case *ast.SelectorExpr:
		x, ok := selectorString(e.X)
		return x + "." + e.Sel.Name, ok
	}
	return "", false
}

// subtests are the names a test function may give t.Run: its string
// literals, as go test spells them (spaces made underscores). Where a
// name is not a literal (a table's tc.name), every string literal of the
// function is a candidate, so that the table's names count.
func subtests(body *ast.BlockStmt) map[string]bool {
	names := map[string]bool{}
	if body == nil {
		return names
	}
	dynamic := false
	var literals []string
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			if s, err := strconv.Unquote(n.Value); err == nil && n.Kind == token.STRING {
				literals = append(literals, s)
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Run" || len(n.Args) != 2 {
				return true
			}
			if _, ok := n.Args[1].(*ast.FuncLit); !ok {
				return true
			}
			if lit, ok := n.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				s, _ := strconv.Unquote(lit.Value)
				names[strings.ReplaceAll(s, " ", "_")] = true
			} else {
				dynamic = true
			}
		}
		return true
	})
	if dynamic {
		for _, s := range literals {
			for _, part := range strings.Split(s, "/") {
				names[strings.ReplaceAll(part, " ", "_")] = true
			}
		}
	}
	return names
}
