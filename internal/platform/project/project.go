// Package project finds the checkout a process runs in, so that the
// commands, the tests and the tools agree on one .data folder and one
// place to build the commands from, wherever they were started.
package project

import (
	"fmt"
	"os"
	"path/filepath"
)

// Root is the nearest directory at or above the working directory that
// holds go.mod. go test runs each package in its own folder and go run
// where it is called; both find the same root.
func Root() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find project root: %w", err)
	}
	return rootFrom(wd)
}

func rootFrom(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("find project root: no go.mod in %s or above", dir)
		}
	}
}
