package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckFlags(t *testing.T) {
	t.Parallel()
	set := func(names ...string) map[string]bool {
		m := map[string]bool{}
		for _, n := range names {
			m[n] = true
		}
		return m
	}

	t.Run("AcceptsTheDrillAndThePooler", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, checkFlags(set(), false, false, "sync", nil))
		require.NoError(t, checkFlags(set("failover", "replication"), true, false, "async", nil))
		require.NoError(t, checkFlags(set("failover", "replication"), true, false, "sync", nil))
		require.NoError(t, checkFlags(set("pooler"), false, true, "sync", nil))
	})

	t.Run("RefusesReplicationWithoutFailover", func(t *testing.T) {
		t.Parallel()
		require.EqualError(t, checkFlags(set("replication"), false, false, "async", nil),
			"-replication async needs -failover: only the failover drill runs a standby")
		require.EqualError(t, checkFlags(set("replication"), false, false, "sync", nil),
			"-replication sync needs -failover: only the failover drill runs a standby")
	})

	t.Run("RefusesPoolerWithFailover", func(t *testing.T) {
		t.Parallel()
		require.ErrorContains(t, checkFlags(set("pooler", "failover"), true, true, "sync", nil), "-pooler and -failover do not go together")
	})

	t.Run("RefusesUnknownReplicationAndArguments", func(t *testing.T) {
		t.Parallel()
		require.EqualError(t, checkFlags(set("failover", "replication"), true, false, "quorum", nil), `-replication "quorum": want sync or async`)
		require.EqualError(t, checkFlags(set(), false, false, "sync", []string{"60s"}), `unexpected arguments ["60s"]`)
	})
}
