package main

import (
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
			async  bool
		}{
			{[]string{"start"}, "start", "postgres", false},
			{[]string{"url", "rocketrides"}, "url", "rocketrides", false},
			{[]string{"status"}, "status", "postgres", false},
			{[]string{"ha", "start"}, "ha start", "postgres", false},
			{[]string{"ha", "start", "-async"}, "ha start", "postgres", true},
			{[]string{"ha", "url", "drill"}, "ha url", "drill", false},
			{[]string{"ha", "kill-leader"}, "ha kill-leader", "postgres", false},
			{[]string{"ha", "status"}, "ha status", "postgres", false},
			{[]string{"pooler", "url", "pooled"}, "pooler url", "pooled", false},
			{[]string{"pooler", "stop"}, "pooler stop", "postgres", false},
		} {
			c, a, err := parse(tc.args)
			require.NoError(t, err, "%q", tc.args)
			require.Equal(t, tc.name, c.name)
			require.Equal(t, tc.dbname, a.dbname)
			require.Equal(t, tc.async, a.flags["-async"])
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
			{[]string{"pooler", "start", "x"}, `localpg pooler start: unexpected arguments ["x"]`},
		} {
			_, _, err := parse(tc.args)
			require.EqualError(t, err, tc.err, "%q", tc.args)
		}
	})
}
