package e2e_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet/fleettest"
)

// TestSecondStart is a second make dev: the Stripe fake keeps its state in
// a file, as make dev has it do, so after the fake is killed and started
// again the reconciler, itself a new process, finds every charge the
// rides record. (With the state in memory it reported each of them as an
// unknown_charge.)
func TestSecondStart(t *testing.T) {
	t.Parallel()
	s := newStack(t, dbtest.NewURL(t), "FAKESTRIPE_STATE="+filepath.Join(t.TempDir(), "fakestripe.jsonl"))
	api := fleettest.Start(t, s.fleet, "api")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newClient(s.token, 15*time.Second)
	keys := []string{uuid.NewString(), uuid.NewString()}
	for _, key := range keys {
		r := c.postRide(ctx, api.URL, key)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r)
	}
	const clean = "charges=2 rides=2 charge_without_ride=0 unknown_charge=0 mismatch=0 double_charge=0 lost_ride=0 restored=0"
	require.Equal(t, clean, fleettest.Run(t, s.fleet, "reconciler", nil, "-once"))

	// A kill, not a shutdown: nothing is written on the way out.
	require.NoError(t, s.stripe.Kill())
	require.NoError(t, s.stripe.Restart(ctx))

	require.Equal(t, clean, fleettest.Run(t, s.fleet, "reconciler", nil, "-once"))
	// The fake still knows the demo customer, and charges it.
	r := c.postRide(ctx, api.URL, uuid.NewString())
	require.Equal(t, http.StatusCreated, r.Status, "%s", r)
	require.Equal(t, 3, s.stripeStats(t)["charges"])
}
