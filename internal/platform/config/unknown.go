package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// AllowUnknown is the setting that lets a process start despite unknown
// variables with the project's prefixes.
const AllowUnknown = "ALLOW_UNKNOWN_SETTINGS"

// Unknown returns, for each variable in environ (NAME=value, as
// os.Environ gives them) that has one of the project's prefixes but is
// no setting of any of its processes, an error naming it and the nearest
// known name: REAPER_MAX_AGES=24h would otherwise be ignored without a
// word, and the reaper keep its 72h. A variable that another process
// reads (a shared environment, such as make dev's) is known.
//
// The known names are those of every process of the project, listed in
// known.go by the generator that writes docs/configuration.md, and those
// declared in this binary.
func Unknown(environ []string) []error {
	known := knownNames()
	prefixes := map[string]bool{}
	for _, name := range known {
		if p := (Setting{Name: name}).Prefix(); p != "" {
			prefixes[p] = true
		}
	}
	var errs []error
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		p := (Setting{Name: name}).Prefix()
		if p == "" || !prefixes[p] || slices.Contains(known, name) {
			continue
		}
		errs = append(errs, fmt.Errorf("%s is not a setting of any Rocket Rides process; did you mean %s? (%s=true starts anyway)",
			name, nearest(name, known), AllowUnknown))
	}
	return errs
}

// CheckUnknown is Unknown as one error, or nil.
func CheckUnknown(environ []string) error { return errors.Join(Unknown(environ)...) }

// knownNames are every setting of the project's processes and every one
// declared in this binary, sorted.
func knownNames() []string {
	names := slices.Clone(projectSettings)
	for _, s := range Declared() {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// KnownNames returns every setting name the project defines, as known.go
// lists them, sorted.
func KnownNames() []string { return slices.Clone(projectSettings) }

// nearest is the name among known closest to name by edit distance; the
// first in order on a tie.
func nearest(name string, known []string) string {
	best, bestDist := "", -1
	for _, k := range known {
		if d := editDistance(name, k); bestDist < 0 || d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
