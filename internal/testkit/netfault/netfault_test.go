package netfault_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/testkit/netfault"
)

// TestLink shows each fault the other tests rely on, on a Postgres
// connection through a link: it works, a blackhole holds a query until
// its deadline, a reset and a cut break the connection, the link serves
// new connections once the fault is gone, and a COMMIT can commit with
// its answer lost.
func TestLink(t *testing.T) {
	t.Parallel()
	ps := netfault.New()
	t.Cleanup(ps.Close)
	dbURL := dbtest.NewURL(t)
	cfg, err := pgx.ParseConfig(dbURL)
	require.NoError(t, err)
	link, err := ps.Link("postgres", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	require.NoError(t, err)
	proxied, err := link.URL(dbURL)
	require.NoError(t, err)

	connect := func(t *testing.T) *pgx.Conn {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, proxied)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		return conn
	}
	query := func(conn *pgx.Conn, timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		var one int
		return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
	}

	conn := connect(t)
	require.NoError(t, query(conn, 30*time.Second), "through a clean link")

	require.NoError(t, link.Add(netfault.Blackhole("hole", netfault.Downstream)))
	require.Error(t, query(conn, 200*time.Millisecond), "the answer never comes")
	require.NoError(t, link.Remove("hole"))
	require.NoError(t, query(connect(t), 30*time.Second), "a new connection once the hole is gone")

	conn = connect(t)
	require.NoError(t, link.Add(netfault.Reset("rst", netfault.Upstream)))
	require.Error(t, query(conn, 30*time.Second), "the query's bytes reset the connection")
	link.Clear()
	require.NoError(t, query(connect(t), 30*time.Second))

	conn = connect(t)
	require.NoError(t, link.Cut())
	require.Error(t, query(conn, 30*time.Second), "a cut connection is gone")
	require.NoError(t, query(connect(t), 30*time.Second), "the link accepts again after a cut")

	conn = connect(t)
	require.NoError(t, link.Add(netfault.Latency("slow", netfault.Downstream, 50*time.Millisecond, 10*time.Millisecond)))
	require.NoError(t, link.Add(netfault.Slice("sliced", netfault.Downstream, 8, 0)))
	require.NoError(t, link.Add(netfault.Bandwidth("thin", netfault.Upstream, 8)))
	require.NoError(t, query(conn, 30*time.Second), "a slow, sliced, thin link still carries the protocol")
	require.Error(t, link.Add(netfault.Latency("slow", netfault.Upstream, time.Millisecond, 0)), "a name is added once")

	// A COMMIT that commits, and whose answer is lost.
	link.Clear()
	conn = connect(t)
	_, err = conn.Exec(context.Background(), "CREATE TABLE committed (n int)")
	require.NoError(t, err)
	require.NoError(t, link.Add(netfault.BlackholeFrom("commit", netfault.Downstream, netfault.CommitAnswer)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "INSERT INTO committed VALUES (1)")
	require.NoError(t, err, "the answers before the COMMIT's pass")
	commitCtx, cancelCommit := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelCommit()
	require.Error(t, tx.Commit(commitCtx), "the COMMIT's answer never comes")
	direct, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer direct.Close(ctx)
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, direct.QueryRow(ctx, "SELECT count(*) FROM committed").Scan(&n))
		return n == 1
	}, 30*time.Second, 20*time.Millisecond, "the transaction commits")
}
