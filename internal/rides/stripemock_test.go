package rides_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

// TestAgainstStripeMock runs a ride through Stripe's official stripe-mock,
// which validates every request against Stripe's OpenAPI spec. The fake
// proves our semantics; this proves that stripe-go, as we configure it,
// speaks real Stripe. stripe-mock is pinned in go.mod as a tool.
func TestAgainstStripeMock(t *testing.T) {
	t.Parallel()
	url := startStripeMock(t)
	b := apitest.New(t, apitest.Options{StripeURL: url})
	key := apitest.NewKey()

	resp := b.PostRide(t, key, apitest.DefaultParams)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	chargeID, _ := resp.JSON(t)["stripe_charge_id"].(string)
	require.True(t, strings.HasPrefix(chargeID, "ch_"), "charge id %q", chargeID)

	replay := b.PostRide(t, key, apitest.DefaultParams)
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Equal(t, string(resp.Body), string(replay.Body))
}

func startStripeMock(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "stripe-mock")
	build := exec.Command("go", "build", "-o", bin, "github.com/stripe/stripe-mock")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run(), "build stripe-mock")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-http-addr", addr)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
			return fmt.Sprintf("http://%s", addr)
		}
		require.True(t, time.Now().Before(deadline), "stripe-mock did not start: %v", err)
		time.Sleep(50 * time.Millisecond)
	}
}
