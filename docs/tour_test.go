package docs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTour holds docs/tour.md's first reading to what it promises: a few
// short files, read whole, each saying at its top what it leaves to a
// second reading. A file that grows past its share, or a stop added to the
// path, fails here rather than going unnoticed until a learner gives up.
func TestTour(t *testing.T) {
	t.Parallel()
	const (
		maxFileLines  = 300
		maxTotalLines = 1500
	)
	tour, err := os.ReadFile("tour.md")
	require.NoError(t, err)
	first, _, found := strings.Cut(string(tour), "## Second reading")
	require.True(t, found, "tour.md has a second-reading section")

	links := regexp.MustCompile(`\]\(\.\./([^)#]+\.(?:go|sql))\)`).FindAllStringSubmatch(first, -1)
	require.NotEmpty(t, links, "the first reading links the files it takes")
	total := 0
	seen := map[string]bool{}
	for _, link := range links {
		path := link[1]
		if seen[path] {
			continue
		}
		seen[path] = true
		src, err := os.ReadFile(filepath.Join("..", path))
		require.NoError(t, err, "the tour links %s", path)
		// The schema is one file, and says where its first reading
		// ends: the tables after its "-- Second reading" line are
		// beyond the article.
		if end := bytes.Index(src, []byte("\n-- Second reading")); end >= 0 && strings.HasSuffix(path, ".sql") {
			src = src[:end+1]
		}
		lines := bytes.Count(src, []byte("\n"))
		total += lines
		require.LessOrEqual(t, lines, maxFileLines, "%s is a first-reading file: read whole, in one sitting", path)
		if strings.HasSuffix(path, ".go") && filepath.Base(path) != "doc.go" {
			require.True(t, bytes.HasPrefix(src, []byte("// First reading:")),
				"%s starts by saying it is a first reading and what it leaves to the second", path)
			require.Contains(t, string(src), "second reading", "%s says where the rest lives", path)
		}
	}
	require.LessOrEqual(t, total, maxTotalLines, "the first reading's files together")
	t.Logf("first reading: %d files, %d lines", len(seen), total)
}
