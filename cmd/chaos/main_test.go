package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
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
		require.NoError(t, checkFlags(set(), time.Minute, 16, false, false, false, "sync", nil))
		require.NoError(t, checkFlags(set("failover", "replication"), time.Minute, 16, true, false, false, "async", nil))
		require.NoError(t, checkFlags(set("failover", "replication"), time.Minute, 16, true, false, false, "sync", nil))
		require.NoError(t, checkFlags(set("failover", "replication"), time.Minute, 16, true, false, false, "strict", nil))
		require.NoError(t, checkFlags(set("failover", "replication"), time.Minute, 16, true, false, false, "relaxed", nil))
		require.NoError(t, checkFlags(set("pooler"), time.Minute, 16, false, true, false, "sync", nil))
	})

	t.Run("RefusesReplicationWithoutFailover", func(t *testing.T) {
		t.Parallel()
		require.EqualError(t, checkFlags(set("replication"), time.Minute, 16, false, false, false, "async", nil),
			"-replication async needs -failover: only the failover drill runs a standby")
		require.EqualError(t, checkFlags(set("replication"), time.Minute, 16, false, false, false, "sync", nil),
			"-replication sync needs -failover: only the failover drill runs a standby")
	})

	t.Run("RefusesDrillFlagsWithoutFailover", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, checkDrillFlags(set("failover", "drill", "kills"), true, 1))
		require.EqualError(t, checkDrillFlags(set("drill"), false, 3), "-drill and -kills need -failover: only the failover drill runs a Patroni cluster")
		require.EqualError(t, checkDrillFlags(set("failover", "kills"), true, 0), "-kills 0: want at least one round")
	})

	t.Run("LeavesSyncToTheDrill", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, localpg.HAMode(""), replicationIf(true, "sync"))
		require.Equal(t, localpg.HAStrict, replicationIf(true, "strict"))
		require.Equal(t, localpg.HARelaxed, replicationIf(true, "relaxed"))
		require.Equal(t, localpg.HAAsync, replicationIf(true, "async"))
		require.Equal(t, localpg.HAMode(""), replicationIf(false, "sync"))
	})

	t.Run("AcceptsTheNetworkNemesisWithoutTheDrill", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, checkFlags(set("network"), time.Minute, 16, false, false, true, "sync", nil))
		require.NoError(t, checkFlags(set("network", "pooler"), time.Minute, 16, false, true, true, "sync", nil))
		require.EqualError(t, checkFlags(set("network", "failover"), time.Minute, 16, true, false, true, "sync", nil),
			"-network and -failover do not go together: a link forwards to one host, the drill fails over to another")
	})

	t.Run("RefusesPoolerWithFailover", func(t *testing.T) {
		t.Parallel()
		require.ErrorContains(t, checkFlags(set("pooler", "failover"), time.Minute, 16, true, true, false, "sync", nil), "-pooler and -failover do not go together")
	})

	t.Run("RefusesASoakOfNoLengthOrNoClients", func(t *testing.T) {
		t.Parallel()
		require.EqualError(t, checkFlags(set("duration"), 0, 16, false, false, false, "sync", nil), "-duration 0s: want a positive duration")
		require.EqualError(t, checkFlags(set("duration"), -5*time.Second, 16, false, false, false, "sync", nil), "-duration -5s: want a positive duration")
		require.EqualError(t, checkFlags(set("clients"), time.Minute, 0, false, false, false, "sync", nil), "-clients 0: want at least one client")
		require.EqualError(t, checkFlags(set("clients"), time.Minute, -3, false, false, false, "sync", nil), "-clients -3: want at least one client")
	})

	t.Run("RefusesUnknownReplicationAndArguments", func(t *testing.T) {
		t.Parallel()
		require.EqualError(t, checkFlags(set("failover", "replication"), time.Minute, 16, true, false, false, "quorum", nil), `-replication "quorum": want sync, strict, relaxed, async`)
		require.EqualError(t, checkFlags(set(), time.Minute, 16, false, false, false, "sync", []string{"60s"}), `unexpected arguments ["60s"]`)
	})
}
