package project

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRoot(t *testing.T) {
	t.Parallel()

	t.Run("FindsTheCheckoutFromAPackage", func(t *testing.T) {
		t.Parallel()
		root, err := Root()
		require.NoError(t, err)
		require.FileExists(t, filepath.Join(root, "go.mod"))
		wd, err := os.Getwd()
		require.NoError(t, err)
		require.Equal(t, filepath.Join(root, "internal", "platform", "project"), wd)
	})

	t.Run("FindsTheNearestGoMod", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		deep := filepath.Join(dir, "a", "b")
		require.NoError(t, os.MkdirAll(deep, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module x\n"), 0o644))
		root, err := rootFrom(deep)
		require.NoError(t, err)
		require.Equal(t, dir, root)
	})

	t.Run("FailsOutsideACheckout", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if _, err := rootFrom(dir); err == nil {
			t.Skipf("a go.mod above %s", dir)
		}
		_, err := rootFrom(dir)
		require.ErrorContains(t, err, "no go.mod in "+dir)
	})
}
