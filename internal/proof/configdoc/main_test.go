package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/project"
)

// TestReferenceIsCurrent fails when docs/configuration.md, .env.example,
// known.go or docs/errors.md says something else than the code: a setting
// or a problem code added, removed or changed without `make docs`.
func TestReferenceIsCurrent(t *testing.T) {
	t.Parallel()
	root, err := project.Root()
	require.NoError(t, err)
	files, err := generate(root)
	require.NoError(t, err)
	require.Len(t, files, 4)
	for path, want := range files {
		got, err := os.ReadFile(filepath.Join(root, path))
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "%s is out of date: run make docs", path)
	}
}
