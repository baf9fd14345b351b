package main

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParse: a command line is checked against the table of commands
// before anything is built or started.
func TestParse(t *testing.T) {
	t.Parallel()

	t.Run("AcceptsEveryCommandAsDocumented", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			args   []string
			name   string
			dbname string
			flag   string
		}{
			{[]string{"start"}, "start", "postgres", ""},
			{[]string{"url", "rocketrides"}, "url", "rocketrides", ""},
			{[]string{"status"}, "status", "postgres", ""},
			{[]string{"ha", "start"}, "ha start", "postgres", ""},
			{[]string{"ha", "start", "-strict"}, "ha start", "postgres", "-strict"},
			{[]string{"ha", "start", "-relaxed"}, "ha start", "postgres", "-relaxed"},
			{[]string{"ha", "start", "-async"}, "ha start", "postgres", "-async"},
			{[]string{"ha", "url", "drill"}, "ha url", "drill", ""},
			{[]string{"ha", "kill-leader"}, "ha kill-leader", "postgres", ""},
			{[]string{"ha", "status"}, "ha status", "postgres", ""},
			{[]string{"pooler", "url", "pooled"}, "pooler url", "pooled", ""},
			{[]string{"pooler", "stop"}, "pooler stop", "postgres", ""},
		} {
			c, a, err := parse(tc.args)
			require.NoError(t, err, "%q", tc.args)
			require.Equal(t, tc.name, c.name)
			require.Equal(t, tc.dbname, a.dbname)
			var flags []string
			if tc.flag != "" {
				flags = []string{tc.flag}
			}
			require.ElementsMatch(t, flags, slices.Collect(maps.Keys(a.flags)), "%q", tc.args)
		}
	})

	t.Run("RefusesWithAPreciseMessage", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			args []string
			err  string
		}{
			{[]string{"begin"}, `localpg: unknown command "begin"`},
			{[]string{"pooler"}, `localpg pooler: missing command`},
			{[]string{"pooler", "restart"}, `localpg: unknown command "pooler restart"`},
			{[]string{"ha", "-async", "start"}, `localpg: unknown command "ha -async"`},
			{[]string{"replica", "start"}, `localpg: unknown command "replica"`},
			{[]string{"start", "now"}, `localpg start: unexpected arguments ["now"]`},
			{[]string{"url", "a", "b"}, `localpg url: unexpected arguments ["b"]`},
			{[]string{"pooler", "url", ""}, `localpg pooler url: the database name is empty`},
			{[]string{"ha", "url", "-async"}, `localpg ha url: unexpected arguments ["-async"]`},
			{[]string{"ha", "start", "-async", "-async"}, `localpg ha start: unexpected arguments ["-async"]`},
			{[]string{"ha", "start", "-strict", "-relaxed"}, `localpg ha start: -relaxed and -strict exclude each other`},
			{[]string{"ha", "url", "-strict"}, `localpg ha url: unexpected arguments ["-strict"]`},
			{[]string{"pooler", "start", "x"}, `localpg pooler start: unexpected arguments ["x"]`},
		} {
			_, _, err := parse(tc.args)
			require.EqualError(t, err, tc.err, "%q", tc.args)
		}
	})
}
