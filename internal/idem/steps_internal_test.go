package idem

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// TestStepStatements holds every statement that appends a step to the
// expression steps.go documents. Each statement spells the expression out
// whole, so that it reads whole where it is defined; this test keeps the
// copies from drifting apart, and from MaxSteps.
func TestStepStatements(t *testing.T) {
	t.Parallel()

	step := `jsonb_build_object\('at', clock_timestamp\(\), 'event', .+?::text, ` +
		`'recovery_point', .+?::text, 'actor', \$\d::text, 'attempt', [^)]+\)`
	appended := regexp.MustCompile(regexp.QuoteMeta(fmt.Sprintf(
		`steps = (CASE WHEN jsonb_array_length(steps) < %d THEN steps `+
			`ELSE jsonb_build_array(steps -> 0) || jsonb_path_query_array(steps, '$[last - %d to last]') END) || `,
		MaxSteps, MaxSteps-3)) + `\(?` + step)
	oneLine := func(sql string) string { return strings.Join(strings.Fields(sql), " ") }

	for name, sql := range map[string]string{
		"takeSQL":           takeSQL,
		"advanceSQL":        advanceSQL,
		"unlockSQL":         unlockSQL,
		"setAsideSQL":       setAsideSQL,
		"unknownOutcomeSQL": unknownOutcomeSQL,
		"reopenSQL":         reopenSQL,
		"claimAbandonedSQL": claimAbandonedSQL,
	} {
		if !appended.MatchString(oneLine(sql)) {
			t.Errorf("%s does not append its step as steps.go says:\n%s", name, sql)
		}
	}
	for name, sql := range map[string]string{"claimFastSQL": claimFastSQL, "insertKeySQL": insertKeySQL} {
		if !regexp.MustCompile(`steps\) SELECT .* jsonb_build_array\(` + step + `\)`).MatchString(oneLine(sql)) {
			t.Errorf("%s does not record the claim's step as steps.go says:\n%s", name, sql)
		}
	}
}
