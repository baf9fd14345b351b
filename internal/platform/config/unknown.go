package config

import (
	"fmt"
	"slices"
	"strings"
)

// AllowUnknown is the setting that lets a process start despite unknown
// variables with the project's prefixes.
const AllowUnknown = "ALLOW_UNKNOWN_SETTINGS"

// prefixes are the first words that only this project's variables use:
// its processes' names and its own words. A word that other software
// uses too (DATABASE_, API_, LOG_, MAX_, STRIPE_, TEST_) is not one of
// them, however many of our settings start with it: DATABASE_PASSWORD,
// API_KEY or STRIPE_WEBHOOK_SECRET in a shared environment are someone
// else's, not a mistyped setting of ours.
var prefixes = []string{
	"COMPLETER_",
	"CONSOLE_",
	"ENQUEUER_",
	"FAKESTRIPE_",
	"IDEMPOTENCY_",
	"LOCALPG_",
	"RATE_",
	"REAPED_",
	"REAPER_",
	"RECEIPT_",
	"RECONCILER_",
	"SEED_",
	"SIMULATOR_",
	"WORKER_",
}

// Prefixes returns the first words, with their underscore, that only the
// project's variables use (REAPER_): those Unknown checks.
func Prefixes() []string { return slices.Clone(prefixes) }

// Unknown returns, for each variable in environ (NAME=value, as
// os.Environ gives them) that has one of the project's prefixes and a
// value but is no setting of any of its processes, an error naming it
// and the nearest known name: REAPER_MAX_AGES=24h would otherwise be
// ignored without a word, and the reaper keep its 72h. A variable that
// another process reads (a shared environment, such as make dev's) is
// known; an empty one is unset, as Env reads it.
//
// The known names are those of every process of the project, listed in
// known.go by the generator that writes docs/configuration.md, and those
// declared in this binary.
func Unknown(environ []string) []error {
	known := knownNames()
	var errs []error
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if value == "" || (Setting{Name: name}).Prefix() == "" || slices.Contains(known, name) {
			continue
		}
		errs = append(errs, fmt.Errorf("%s is not a setting of any Rocket Rides process; did you mean %s? (%s=true starts anyway)",
			name, nearest(name, known), AllowUnknown))
	}
	return errs
}

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
