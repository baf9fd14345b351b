package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/config"
)

func TestEnv(t *testing.T) {
	t.Run("ReadsSettingsAndDefaults", func(t *testing.T) {
		t.Setenv("ENV_TEST_URL", "postgres://x")
		t.Setenv("ENV_TEST_WAIT", "90s")
		t.Setenv("ENV_TEST_SIZE", "")
		var env config.Env
		require.Equal(t, "postgres://x", env.Required("ENV_TEST_URL"))
		require.Equal(t, 90*time.Second, env.Duration("ENV_TEST_WAIT", time.Second))
		require.Equal(t, 7, env.Int("ENV_TEST_SIZE", 7))
		require.NoError(t, env.Err())
	})

	t.Run("NamesEveryBadSetting", func(t *testing.T) {
		t.Setenv("ENV_TEST_URL", "")
		t.Setenv("ENV_TEST_WAIT", "soon")
		t.Setenv("ENV_TEST_SIZE", "big")
		t.Setenv("ENV_TEST_SHARE", "half")
		t.Setenv("ENV_TEST_ON", "maybe")
		var env config.Env
		env.Required("ENV_TEST_URL")
		env.Duration("ENV_TEST_WAIT", time.Second)
		env.Int("ENV_TEST_SIZE", 1)
		env.Float("ENV_TEST_SHARE", 0.5)
		env.Bool("ENV_TEST_ON", false)
		err := env.Err()
		require.Error(t, err)
		for _, name := range []string{"ENV_TEST_URL", "ENV_TEST_WAIT", "ENV_TEST_SIZE", "ENV_TEST_SHARE", "ENV_TEST_ON"} {
			require.Contains(t, err.Error(), name)
		}
	})
}
