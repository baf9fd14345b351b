package dbtest

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RoundTrips counts what a pool sends, as its pgx tracer: single
// statements and pipelined batches (an atomic phase's), one round trip
// each, and the statements in the batches.
type RoundTrips struct{ Queries, Batches, Batched atomic.Int64 }

func (c *RoundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.Queries.Add(1)
	return ctx
}
func (c *RoundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *RoundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.Batches.Add(1)
	return ctx
}
func (c *RoundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.Batched.Add(1)
}
func (c *RoundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// Reset starts the count again.
func (c *RoundTrips) Reset() { c.Queries.Store(0); c.Batches.Store(0); c.Batched.Store(0) }

// Total is the round trips counted since the last Reset.
func (c *RoundTrips) Total() int64 { return c.Queries.Load() + c.Batches.Load() }

// NewCounted returns a pool on a fresh database, as New does, and what
// counts its round trips. The pool never pings a connection it hands out,
// which would be one round trip more; maxConns of zero keeps pgx's
// default.
func NewCounted(t testing.TB, maxConns int32) (*pgxpool.Pool, *RoundTrips) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(NewURL(t))
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	trips := &RoundTrips{}
	cfg.ConnConfig.Tracer = trips
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool, trips
}
