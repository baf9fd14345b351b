package docs_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// docBudgets is the most lines each document under docs/ may have. A
// document here is a reference, read in one sitting; the history of how
// its figures were reached belongs in the commits that measured them. A
// budget is raised here, where a reviewer sees it, and a new document
// comes with one.
var docBudgets = map[string]int{
	"architecture.md":  100,
	"clients.md":       420, // two clients; the journal, the command's contract, the death cases and what the rider sees
	"configuration.md": 360, // generated; every process lists the OTEL_* tracing settings it reads
	"deployment.md":    240,
	"errors.md":        140,
	"failures.md":      450,
	"scaling.md":       310, // what tracing costs, beside what the rate limits cost
	"tour.md":          250,
	"tracing.md":       110,
}

// TestDocBudgets holds each document under docs/ to its budget, as
// TestTour holds the first reading to its own: a document that grows past
// it, or a new one without one, fails here rather than growing unnoticed
// into a notebook.
func TestDocBudgets(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob("*.md")
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	lines := map[string]int{}
	for _, path := range paths {
		src, err := os.ReadFile(path)
		require.NoError(t, err)
		lines[path] = bytes.Count(src, []byte("\n"))
	}
	for _, problem := range budgetProblems(lines, docBudgets) {
		t.Error(problem)
	}
	t.Logf("lines against budgets: %v, %v", lines, docBudgets)

	// The check itself: growth, a document without a budget and a budget
	// without a document are each caught.
	t.Run("CatchesGrowth", func(t *testing.T) {
		t.Parallel()
		got := budgetProblems(
			map[string]int{"kept.md": 300, "grown.md": 301, "new.md": 10},
			map[string]int{"kept.md": 300, "grown.md": 300, "gone.md": 50})
		require.Equal(t, []string{
			"docs/gone.md has a budget but is not in docs/: remove it from docBudgets",
			"docs/grown.md has 301 lines, over its budget of 300: cut it, or raise the budget in docBudgets and say why",
			"docs/new.md has no budget: add it to docBudgets",
		}, got)
	})
}

// budgetProblems compares the documents' line counts, by file name, with
// budgets, and returns what is wrong, sorted.
func budgetProblems(lines, budgets map[string]int) []string {
	var problems []string
	for doc, n := range lines {
		budget, ok := budgets[doc]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("docs/%s has no budget: add it to docBudgets", doc))
		case n > budget:
			problems = append(problems, fmt.Sprintf(
				"docs/%s has %d lines, over its budget of %d: cut it, or raise the budget in docBudgets and say why", doc, n, budget))
		}
	}
	for doc := range budgets {
		if _, ok := lines[doc]; !ok {
			problems = append(problems, fmt.Sprintf("docs/%s has a budget but is not in docs/: remove it from docBudgets", doc))
		}
	}
	slices.Sort(problems)
	return problems
}
