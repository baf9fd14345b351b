package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/config"
)

func TestEnvPositive(t *testing.T) {
	t.Run("UnsetIsTheDefault", func(t *testing.T) {
		t.Setenv("ENV_TEST_TIMEOUT", "")
		t.Setenv("ENV_TEST_ATTEMPTS", "")
		var env config.Env
		require.Equal(t, 20*time.Second, env.PositiveDuration("ENV_TEST_TIMEOUT", 20*time.Second))
		require.Equal(t, 10, env.PositiveInt("ENV_TEST_ATTEMPTS", 10))
		require.NoError(t, env.Err())
	})

	t.Run("ExplicitZeroIsRefusedByName", func(t *testing.T) {
		t.Setenv("ENV_TEST_TIMEOUT", "0")
		t.Setenv("ENV_TEST_ATTEMPTS", "0")
		var env config.Env
		env.PositiveDuration("ENV_TEST_TIMEOUT", 20*time.Second)
		env.PositiveInt("ENV_TEST_ATTEMPTS", 10)
		err := env.Err()
		require.ErrorContains(t, err, "ENV_TEST_TIMEOUT must be greater than zero")
		require.ErrorContains(t, err, "ENV_TEST_ATTEMPTS must be at least 1, got 0")
	})

	t.Run("NegativeCountIsRefusedOnce", func(t *testing.T) {
		t.Setenv("ENV_TEST_ATTEMPTS", "-3")
		t.Setenv("ENV_TEST_TIMEOUT", "soon")
		var env config.Env
		env.PositiveInt("ENV_TEST_ATTEMPTS", 10)
		env.PositiveDuration("ENV_TEST_TIMEOUT", time.Second)
		require.Equal(t, "ENV_TEST_ATTEMPTS must be at least 1, got -3 (unset, it is 10)\n"+
			`ENV_TEST_TIMEOUT="soon" is not a duration such as 90s or 5m`, env.Err().Error())
	})
}
