package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRefusesBadFlags: every flag the command cannot use is refused by
// name, with its value, before anything is served or run.
func TestRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]string{
		"-budget 0":                     "-budget must be at least 1, got 0",
		"-budget -3":                    "-budget must be at least 1, got -3",
		"-client true -case-timeout 0s": "-case-timeout must be positive, got 0s",
		"-case-timeout 5s":              "-case-timeout bounds a -client run; without -client nothing is run",
		"./myclient":                    `unexpected argument "./myclient" (a client command goes in -client)`,
		"-budget many":                  `invalid value "many" for flag -budget`,
		"-client true -project":         "-client and -project each say which client to check: give one",
	} {
		var stderr strings.Builder
		require.Equal(t, 2, run(strings.Fields(args), &stderr), args)
		require.Contains(t, stderr.String(), want, args)
	}
}
