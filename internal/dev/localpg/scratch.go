package localpg

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"

	"github.com/rocketrides/rocketrides/internal/platform/project"
)

// ScratchDir names a directory for a throwaway cluster, a test's or a
// drill's: scratch-<what>-<random> under the project's .data/, which the
// server's user can reach, unlike a test's temporary directory. It is not
// created; the cluster's start creates it. Remove deletes it again.
func ScratchDir(what string) (string, error) {
	root, err := project.Root()
	if err != nil {
		return "", err
	}
	var random [4]byte
	if _, err := rand.Read(random[:]); err != nil {
		return "", err
	}
	return filepath.Join(root, ".data", "scratch-"+what+"-"+hex.EncodeToString(random[:])), nil
}

// Remove stops the cluster and deletes all it keeps on disk: its data
// directory, log and lock file. For a throwaway cluster (ScratchDir).
func (c Cluster) Remove(ctx context.Context) error {
	if err := c.Stop(ctx); err != nil {
		return err
	}
	return errors.Join(os.RemoveAll(c.DataDir), os.RemoveAll(c.LogFile), os.RemoveAll(c.lockFile))
}

// Remove stops the replicated cluster and deletes its directory, which
// holds all it keeps on disk. For a throwaway cluster (ScratchDir).
func (h *HA) Remove(ctx context.Context) error {
	if err := h.Stop(ctx); err != nil {
		return err
	}
	return os.RemoveAll(h.Dir)
}
