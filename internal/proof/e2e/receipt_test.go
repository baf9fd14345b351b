package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/jobs"
	"github.com/rocketrides/rocketrides/internal/platform/mail"
	"github.com/rocketrides/rocketrides/internal/testkit/dbtest"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet/fleettest"
	"github.com/rocketrides/rocketrides/internal/testkit/invariant"
)

// TestRideToReceipt follows one ride through every process as they run in
// production, each in its loop: the api charges and stages the receipt
// job, the enqueuer moves it into River once the phase has committed, and
// the worker mails it. It runs on both of the key store's paths.
func TestRideToReceipt(t *testing.T) {
	t.Parallel()
	for _, pipeline := range []string{"on", "off"} {
		t.Run("Pipeline"+pipeline, func(t *testing.T) {
			t.Parallel()
			testRideToReceipt(t, pipeline)
		})
	}
}

func testRideToReceipt(t *testing.T, pipeline string) {
	s := newStack(t, dbtest.NewURL(t))
	mailDir := t.TempDir()
	api := fleettest.Start(t, s.fleet, "api", idem.Pipeline+"="+pipeline)
	fleettest.Start(t, s.fleet, "enqueuer")
	fleettest.Start(t, s.fleet, "worker", "MAIL_DIR="+mailDir)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newClient(s.token, 15*time.Second).postRide(ctx, api.URL, uuid.NewString())
	require.Equal(t, http.StatusCreated, r.Status, "%s", r)
	var ride struct {
		ID             int64  `json:"id"`
		StripeChargeID string `json:"stripe_charge_id"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &ride))

	mail := filepath.Join(mailDir, mail.FileName(jobs.ReceiptMessageID(ride.ID)))
	waitFor(t, time.Minute, "the receipt of ride in "+mail, func() bool {
		_, err := os.Stat(mail)
		return err == nil
	})
	content, err := os.ReadFile(mail)
	require.NoError(t, err)
	require.Contains(t, string(content), "Subject: "+jobs.ReceiptSubject)
	require.Contains(t, string(content), "user@example.com")
	require.Len(t, mails(t, mailDir), 1)

	waitFor(t, time.Minute, "the worker to record the receipt", func() bool {
		report, err := invariant.Check(ctx, s.pool, invariant.NewStripeClient(s.stripe.URL, stripeKey),
			invariant.Options{ReceiptsDrained: true})
		require.NoError(t, err)
		return report.OK()
	})
}
