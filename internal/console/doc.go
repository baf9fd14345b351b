package console

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/parser"

	"github.com/rocketrides/rocketrides/docs"
)

// Sections of docs/failures.md that the story's sentences link.
const (
	sectionMurphy      = "The article's \"Murphy's law\" list"
	sectionAssumptions = "Four assumptions: claim, intent, memory, boundary"
	sectionResidual    = "Residual risks, and who notices"
)

// anchor is a heading's id on the console's copy of docs/failures.md:
// lowercase letters and digits, words joined by hyphens, as GitHub names
// them.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// failuresLink is the console's link to section of docs/failures.md.
func failuresLink(section string) string { return "/docs/failures#" + anchor(section) }

// headingIDs gives goldmark's headings the ids anchor makes, so that the
// links above land.
type headingIDs struct{ seen map[string]int }

func (h *headingIDs) Generate(value []byte, _ ast.NodeKind) []byte {
	id := anchor(string(value))
	if n := h.seen[id]; n > 0 {
		h.seen[id]++
		return fmt.Appendf(nil, "%s-%d", id, n)
	}
	h.seen[id] = 1
	return []byte(id)
}

func (h *headingIDs) Put(value []byte) { h.seen[string(value)]++ }

// renderFailures renders docs/failures.md, embedded in the binary, to
// HTML. goldmark escapes any raw HTML in the file (no WithUnsafe).
func renderFailures() (template.HTML, error) {
	md := goldmark.New(goldmark.WithExtensions(extension.Table), goldmark.WithParserOptions(parser.WithAutoHeadingID()))
	var out bytes.Buffer
	ctx := parser.NewContext(parser.WithIDs(&headingIDs{seen: map[string]int{}}))
	if err := md.Convert(docs.Failures, &out, parser.WithContext(ctx)); err != nil {
		return "", fmt.Errorf("render docs/failures.md: %w", err)
	}
	return template.HTML(out.String()), nil //nolint:gosec // goldmark's output, raw HTML escaped
}

func (c *Console) failures(w http.ResponseWriter, r *http.Request, s *session) {
	c.render(w, r, "doc", s, map[string]any{"Doc": c.failuresHTML})
}
