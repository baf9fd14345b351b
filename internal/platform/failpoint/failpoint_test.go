package failpoint_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/failpoint"
)

func TestSet(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	errInjected := errors.New("injected")

	t.Run("NilArmsNothing", func(t *testing.T) {
		t.Parallel()
		var set *failpoint.Set
		require.False(t, set.Armed("after_claim"))
		require.NoError(t, set.At(ctx, "after_claim"))
	})

	t.Run("ArmedSeamFailsUntilDisarmed", func(t *testing.T) {
		t.Parallel()
		var set failpoint.Set
		set.Arm("after_claim", func(context.Context) error { return errInjected })
		require.True(t, set.Armed("after_claim"))
		require.ErrorIs(t, set.At(ctx, "after_claim"), errInjected)
		require.False(t, set.Armed("before_charge"), "only the seam armed")
		require.NoError(t, set.At(ctx, "before_charge"))

		set.Arm("after_claim", nil)
		require.False(t, set.Armed("after_claim"), "a nil func disarms")
		require.NoError(t, set.At(ctx, "after_claim"))
	})
}
