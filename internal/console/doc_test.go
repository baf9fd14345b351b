package console

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/idem"
)

// Every section a story's sentence links is a heading of the console's
// copy of docs/failures.md, under the id the link names.
func TestFailuresLinksLand(t *testing.T) {
	t.Parallel()
	html, err := renderFailures()
	require.NoError(t, err)
	sections := []string{sectionMurphy, sectionAssumptions, sectionResidual}
	for _, event := range []idem.StepEvent{idem.StepClaimed, idem.StepResumed, idem.StepTookOver, idem.StepReached,
		idem.StepUnknownOutcome, idem.StepSetAside, idem.StepUnlocked, idem.StepReopened} {
		w := why(idem.Step{Event: event}, &idem.Key{ID: 1})
		require.NotEmpty(t, w.Section, "step %s", event)
		require.Contains(t, sections, w.Section, "step %s", event)
	}
	for _, s := range sections {
		id := strings.TrimPrefix(failuresLink(s), "/docs/failures#")
		require.Contains(t, string(html), `id="`+id+`"`, "section %q", s)
	}
	require.Equal(t, "the-articles-murphys-law-list", anchor(sectionMurphy))
	require.Equal(t, "four-assumptions-claim-intent-memory-boundary", anchor(sectionAssumptions))
}
