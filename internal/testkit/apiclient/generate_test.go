package apiclient_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// regenerate is the command that brings the committed client up to date.
const regenerate = "make generate"

// TestGeneratedCodeIsCurrent runs this package's go:generate line, with
// the pinned oapi-codegen, into a temporary directory and compares the
// result with the committed code: a change to docs/openapi.yaml (or to the
// generator's settings or version) that was not followed by regenerating
// fails here, naming the command to run.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	t.Parallel()

	args, output := generateCommand(t)
	out := filepath.Join(t.TempDir(), output)
	args[slices.Index(args, output)] = out
	cmd := exec.CommandContext(t.Context(), args[0], args[1:]...)
	combined, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s: %s", strings.Join(args, " "), combined)

	want, err := os.ReadFile(out)
	require.NoError(t, err)
	got, err := os.ReadFile(output)
	require.NoError(t, err, "the generated client is missing; run `%s` and commit the result", regenerate)
	if !bytes.Equal(got, want) {
		t.Fatalf("internal/testkit/apiclient/%s is not what docs/openapi.yaml generates; run `%s` and commit the result.\n%s",
			output, regenerate, firstDifference(got, want))
	}
}

// generateCommand returns the arguments of the package's go:generate line
// and the output file it names with -o.
func generateCommand(t *testing.T) (args []string, output string) {
	t.Helper()
	src, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	for line := range strings.Lines(string(src)) {
		directive, ok := strings.CutPrefix(strings.TrimSpace(line), "//go:generate ")
		if !ok {
			continue
		}
		args = strings.Fields(directive)
		i := slices.Index(args, "-o")
		require.True(t, i >= 0 && i+1 < len(args), "doc.go's go:generate line names no output file with -o: %s", line)
		return args, args[i+1]
	}
	t.Fatal("doc.go has no go:generate line")
	return nil, ""
}

// firstDifference describes the first line at which the committed code
// (got) and the regenerated code (want) differ.
func firstDifference(got, want []byte) string {
	gotLines, wantLines := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(gotLines), len(wantLines)) {
		g, w := "(end of file)", "(end of file)"
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if g != w {
			return fmt.Sprintf("First difference, line %d:\n  committed:   %s\n  regenerated: %s", i+1, g, w)
		}
	}
	return "" // unreachable: splitting at newlines loses nothing
}
