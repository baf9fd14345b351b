package fakestripe_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/rocketrides/rocketrides/internal/dev/fakestripe"
)

// TestStatePath: an account kept in a state file is the same account after
// a restart, down to the idempotent results it replays.
func TestStatePath(t *testing.T) {
	t.Parallel()

	// restart closes the server and opens a new one on the same file.
	restart := func(t *testing.T, f *fake, path string) *fake {
		t.Helper()
		require.NoError(t, f.server.Close())
		return startFake(t, &fakestripe.Config{StatePath: path})
	}

	t.Run("KeepsTheAccountAcrossARestart", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "state", "fake.jsonl")
		f := startFake(t, &fakestripe.Config{StatePath: path})

		good := f.createCustomer(t, "good@example.com", fakestripe.TokenVisa)
		bad := f.createCustomer(t, "bad@example.com", fakestripe.TokenChargeCustomerFail)
		charge, err := f.client.Charges.New(chargeParams(good.ID, 2000, "key-1"))
		require.NoError(t, err)
		update := &stripe.ChargeParams{}
		update.AddMetadata("ride_id", "7")
		_, err = f.client.Charges.Update(charge.ID, update)
		require.NoError(t, err)
		_, err = f.client.Charges.New(chargeParams(bad.ID, 2000, "key-2"))
		requireStripeError(t, err, http.StatusPaymentRequired, stripe.ErrorTypeCard, stripe.ErrorCodeCardDeclined)
		first := f.do(t, http.MethodPost, "/v1/charges", testAPIKey, "key-3",
			"amount=5000&currency=usd&customer="+good.ID)
		require.Equal(t, http.StatusOK, first.status, string(first.body))
		charges, customers := f.server.Charges(), f.server.Customers()

		f = restart(t, f, path)
		require.Equal(t, charges, f.server.Charges())
		require.Equal(t, "7", f.server.Charges()[0].Metadata["ride_id"])
		require.Equal(t, customers, f.server.Customers())

		// The stored result is replayed byte for byte, not run again.
		again := f.do(t, http.MethodPost, "/v1/charges", testAPIKey, "key-3",
			"amount=5000&currency=usd&customer="+good.ID)
		require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
		require.Equal(t, first.body, again.body)
		// The card that declines still declines.
		_, err = f.client.Charges.New(chargeParams(bad.ID, 2000, "key-4"))
		requireStripeError(t, err, http.StatusPaymentRequired, stripe.ErrorTypeCard, stripe.ErrorCodeCardDeclined)
		require.Len(t, f.server.Charges(), len(charges)+1)

		// A second restart reads the compacted file the first one wrote.
		charges = f.server.Charges()
		f = restart(t, f, path)
		require.Equal(t, charges, f.server.Charges())
	})

	t.Run("IgnoresATornLastLine", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "fake.jsonl")
		f := startFake(t, &fakestripe.Config{StatePath: path})
		f.createCustomer(t, "good@example.com", fakestripe.TokenVisa)
		require.NoError(t, f.server.Close())

		// A kill in the middle of a write.
		file, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		_, err = file.WriteString(`{"charge":{"id":"ch_`)
		require.NoError(t, err)
		require.NoError(t, file.Close())

		server, err := fakestripe.New(&fakestripe.Config{StatePath: path})
		require.NoError(t, err)
		t.Cleanup(func() { _ = server.Close() })
		require.Len(t, server.Customers(), 1)
		require.Empty(t, server.Charges())
	})

	t.Run("RefusesACorruptFile", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "fake.jsonl")
		require.NoError(t, os.WriteFile(path, []byte("not json\n{}\n"), 0o600))
		_, err := fakestripe.New(&fakestripe.Config{StatePath: path})
		require.ErrorContains(t, err, "line 1")
		require.ErrorContains(t, err, "delete the file to start empty")
	})
}
