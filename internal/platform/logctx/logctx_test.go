package logctx_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/logctx"
)

func TestHandler(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		logger *slog.Logger
		out    *bytes.Buffer
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		out := &bytes.Buffer{}
		return &testBundle{logger: slog.New(logctx.NewHandler(slog.NewJSONHandler(out, nil))), out: out}
	}
	// line decodes the one JSON line logged.
	line := func(t *testing.T, b *testBundle) map[string]any {
		t.Helper()
		var m map[string]any
		require.NoError(t, json.Unmarshal(b.out.Bytes(), &m), "%s", b.out)
		return m
	}

	t.Run("AddsTheContextsAttributes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := logctx.New(context.Background(), slog.String(logctx.RequestID, "req-1"))
		logctx.Set(ctx, slog.Int64(logctx.UserID, 7))
		b.logger.InfoContext(ctx, "Hello", slog.Int("n", 1))
		m := line(t, b)
		require.Equal(t, "req-1", m["request_id"])
		require.EqualValues(t, 7, m["user_id"])
		require.EqualValues(t, 1, m["n"])
	})

	t.Run("LaterValuesReplaceEarlierOnes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := logctx.New(context.Background())
		logctx.Set(ctx, slog.String(logctx.RecoveryPoint, "started"))
		logctx.Set(ctx, slog.String(logctx.RecoveryPoint, "finished"))
		b.logger.InfoContext(ctx, "Hello")
		require.Equal(t, "finished", line(t, b)["recovery_point"])
		require.Equal(t, 1, bytes.Count(b.out.Bytes(), []byte(`"recovery_point"`)))
	})

	t.Run("InnerLayersReachTheOuterContext", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		outer := logctx.New(context.Background())
		inner, cancel := context.WithCancel(outer)
		defer cancel()
		logctx.Set(inner, slog.Int64(logctx.IdempotencyKeyID, 42))
		b.logger.InfoContext(outer, "Request")
		require.EqualValues(t, 42, line(t, b)["idempotency_key_id"])
	})

	t.Run("TheCallsOwnAttributeWins", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := logctx.New(context.Background(), slog.Int64(logctx.UserID, 7))
		b.logger.InfoContext(ctx, "Hello", slog.Int64(logctx.UserID, 8))
		require.EqualValues(t, 8, line(t, b)["user_id"])
		require.Equal(t, 1, bytes.Count(b.out.Bytes(), []byte(`"user_id"`)))
	})

	t.Run("WithoutASetNothingIsAdded", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		logctx.Set(ctx, slog.Int64(logctx.UserID, 7)) // no set: ignored
		b.logger.InfoContext(ctx, "Hello")
		b.logger.Info("No context")
		require.NotContains(t, b.out.String(), "user_id")
	})

	t.Run("SurvivesWith", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := logctx.New(context.Background(), slog.String(logctx.RequestID, "req-1"))
		b.logger.With(slog.String("process", "api")).InfoContext(ctx, "Hello")
		m := line(t, b)
		require.Equal(t, "api", m["process"])
		require.Equal(t, "req-1", m["request_id"])
	})

	t.Run("SetWhileLogging", func(t *testing.T) {
		t.Parallel()
		// Run with -race: the set is shared by every goroutine holding
		// the context.
		logger := slog.New(logctx.NewHandler(slog.NewJSONHandler(&bytes.Buffer{}, nil)))
		ctx := logctx.New(context.Background())
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				for j := range 100 {
					logctx.Set(ctx, slog.Int("i", i), slog.Int("j", j))
					logger.InfoContext(ctx, "Concurrent")
				}
			})
		}
		wg.Wait()
	})
}
