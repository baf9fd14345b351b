package config_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/config"
)

// The settings these tests read: Env reads only declared ones.
var _ = config.Declare(
	config.Setting{Name: "ENV_TEST_URL", Type: config.TypeURL, Required: true, Help: "a required URL"},
	config.Setting{Name: "ENV_TEST_UNSET", Type: config.TypeString, Help: "never set"},
	config.Setting{Name: "ENV_TEST_UNSET_WAIT", Type: config.TypeDuration, Help: "never set"},
	config.Setting{Name: "ENV_TEST_UNSET_HOST", Type: config.TypeHost, Help: "never set"},
	config.Setting{Name: "ENV_TEST_WAIT", Type: config.TypeDuration, Help: "a duration"},
	config.Setting{Name: "ENV_TEST_WAIT_OR_ZERO", Type: config.TypeDuration, Zero: "no wait", Help: "a duration"},
	config.Setting{Name: "ENV_TEST_SIZE", Type: config.TypeInt, Help: "a count"},
	config.Setting{Name: "ENV_TEST_SIZE_OR_ZERO", Type: config.TypeInt, Zero: "none", Help: "a count"},
	config.Setting{Name: "ENV_TEST_SHARE", Type: config.TypeFraction, Help: "a share"},
	config.Setting{Name: "ENV_TEST_SHARE_OR_ZERO", Type: config.TypeFraction, Zero: "none", Help: "a share"},
	config.Setting{Name: "ENV_TEST_ON", Type: config.TypeBool, Help: "a switch"},
	config.Setting{Name: "ENV_TEST_PORT", Type: config.TypePort, Zero: "any free port", Help: "a port"},
	config.Setting{Name: "ENV_TEST_HOST", Type: config.TypeHost, Help: "a host"},
	config.Setting{Name: "ENV_TEST_ADDR", Type: config.TypeAddress, Help: "an address"},
	config.Setting{Name: "ENV_TEST_LINK", Type: config.TypeURL, Help: "a URL"},
	config.Setting{Name: "ENV_TEST_DSN", Type: config.TypeConnString, Help: "a connection string"},
	config.Setting{Name: "ENV_TEST_FLOOR", Type: config.TypeDuration, Min: time.Second, Help: "a duration of at least 1s"},
	config.Setting{Name: "ENV_TEST_CEILING", Type: config.TypeDuration, Max: 5 * time.Minute, Help: "a duration of at most 5m"},
)

func TestEnv(t *testing.T) {
	// t.Setenv rules out t.Parallel.

	t.Run("ReadsSettingsAndDefaults", func(t *testing.T) {
		t.Setenv("ENV_TEST_URL", "postgres://x")
		t.Setenv("ENV_TEST_WAIT", "90s")
		t.Setenv("ENV_TEST_SIZE", "")
		t.Setenv("ENV_TEST_SHARE", "0.25")
		t.Setenv("ENV_TEST_ON", "true")
		t.Setenv("ENV_TEST_PORT", "8080")
		var env config.Env
		require.Equal(t, "postgres://x", env.Required("ENV_TEST_URL"))
		require.Equal(t, "postgres://x", env.String("ENV_TEST_URL", "default"))
		require.Equal(t, "default", env.String("ENV_TEST_UNSET", "default"))
		require.Equal(t, 90*time.Second, env.Duration("ENV_TEST_WAIT", time.Second))
		require.Equal(t, time.Second, env.Duration("ENV_TEST_UNSET_WAIT", time.Second))
		require.Equal(t, 7, env.Int("ENV_TEST_SIZE", 7), "empty is unset")
		require.Equal(t, 0.25, env.Fraction("ENV_TEST_SHARE", 0.5))
		require.True(t, env.Bool("ENV_TEST_ON", false))
		require.Equal(t, 8080, env.Port("ENV_TEST_PORT", 5000))
		require.NoError(t, env.Err())
	})

	t.Run("HonoursZeroWhereItMeansSomething", func(t *testing.T) {
		t.Setenv("ENV_TEST_WAIT_OR_ZERO", "0s")
		t.Setenv("ENV_TEST_SIZE_OR_ZERO", "0")
		t.Setenv("ENV_TEST_SHARE_OR_ZERO", "0")
		t.Setenv("ENV_TEST_PORT", "0")
		var env config.Env
		require.Zero(t, env.DurationOrZero("ENV_TEST_WAIT_OR_ZERO", time.Second))
		require.Zero(t, env.IntOrZero("ENV_TEST_SIZE_OR_ZERO", 7))
		require.Zero(t, env.FractionOrZero("ENV_TEST_SHARE_OR_ZERO", 0.5))
		require.Zero(t, env.Port("ENV_TEST_PORT", 5000))
		require.NoError(t, env.Err())
	})

	t.Run("RefusesZeroElseNamingTheVariable", func(t *testing.T) {
		t.Setenv("ENV_TEST_WAIT", "0s")
		t.Setenv("ENV_TEST_SIZE", "0")
		t.Setenv("ENV_TEST_SHARE", "0")
		var env config.Env
		require.Zero(t, env.Duration("ENV_TEST_WAIT", time.Second), "never the default")
		require.Zero(t, env.Int("ENV_TEST_SIZE", 7), "never the default")
		require.Zero(t, env.Fraction("ENV_TEST_SHARE", 0.5), "never the default")
		err := env.Err()
		require.ErrorContains(t, err, "ENV_TEST_WAIT=0s: must be positive")
		require.ErrorContains(t, err, "ENV_TEST_SIZE=0: must be positive")
		require.ErrorContains(t, err, "ENV_TEST_SHARE=0: must be above 0 and at most 1")
	})

	t.Run("RefusesNegatives", func(t *testing.T) {
		t.Setenv("ENV_TEST_WAIT", "-1s")
		t.Setenv("ENV_TEST_SIZE", "-1")
		t.Setenv("ENV_TEST_PORT", "-1")
		var env config.Env
		env.Duration("ENV_TEST_WAIT", time.Second)
		env.Int("ENV_TEST_SIZE", 7)
		require.Error(t, env.Err())
		t.Setenv("ENV_TEST_WAIT_OR_ZERO", "-1s")
		t.Setenv("ENV_TEST_SIZE_OR_ZERO", "-1")
		env = config.Env{}
		env.DurationOrZero("ENV_TEST_WAIT_OR_ZERO", time.Second)
		env.IntOrZero("ENV_TEST_SIZE_OR_ZERO", 7)
		env.Port("ENV_TEST_PORT", 5000)
		err := env.Err()
		require.ErrorContains(t, err, "ENV_TEST_WAIT_OR_ZERO=-1s: must not be negative")
		require.ErrorContains(t, err, "ENV_TEST_SIZE_OR_ZERO=-1: must not be negative")
		require.ErrorContains(t, err, "ENV_TEST_PORT=-1: must be a port number")
	})

	t.Run("RefusesOutOfRange", func(t *testing.T) {
		t.Setenv("ENV_TEST_SHARE", "1.5")
		t.Setenv("ENV_TEST_SHARE_OR_ZERO", "1.5")
		t.Setenv("ENV_TEST_PORT", "65536")
		var env config.Env
		env.Fraction("ENV_TEST_SHARE", 0.5)
		env.FractionOrZero("ENV_TEST_SHARE_OR_ZERO", 0.5)
		env.Port("ENV_TEST_PORT", 5000)
		err := env.Err()
		require.ErrorContains(t, err, "ENV_TEST_SHARE=1.5: must be above 0 and at most 1")
		require.ErrorContains(t, err, "ENV_TEST_SHARE_OR_ZERO=1.5: must be from 0 to 1")
		require.ErrorContains(t, err, "ENV_TEST_PORT=65536: must be a port number")
	})

	t.Run("RefusesAnInt32ThatWouldWrapAround", func(t *testing.T) {
		t.Setenv("ENV_TEST_SIZE_OR_ZERO", "2147483647")
		var env config.Env
		require.Equal(t, int32(2147483647), env.Int32OrZero("ENV_TEST_SIZE_OR_ZERO", 0))
		require.NoError(t, env.Err())
		t.Setenv("ENV_TEST_SIZE_OR_ZERO", "4294967297")
		require.Zero(t, env.Int32OrZero("ENV_TEST_SIZE_OR_ZERO", 0), "not 1")
		require.ErrorContains(t, env.Err(), "ENV_TEST_SIZE_OR_ZERO=4294967297: must be at most 2147483647")
	})

	t.Run("ReadsAHost", func(t *testing.T) {
		var env config.Env
		require.Equal(t, "127.0.0.1", env.Host("ENV_TEST_UNSET_HOST", "127.0.0.1"))
		for _, host := range []string{"0.0.0.0", "127.0.0.1", "127.0.0.2", "::1", "::", "localhost"} {
			t.Setenv("ENV_TEST_HOST", host)
			require.Equal(t, host, env.Host("ENV_TEST_HOST", "127.0.0.1"))
		}
		require.NoError(t, env.Err())
	})

	// HOST=evil.example used to pass, and the listener then failed
	// naming its address instead of the setting.
	t.Run("RefusesAHostThatIsNotThisMachines", func(t *testing.T) {
		for host, want := range map[string]string{
			"evil.example": "the name does not resolve",
			"203.0.113.9":  "not an address of this machine",
		} {
			t.Setenv("ENV_TEST_HOST", host)
			var env config.Env
			require.Empty(t, env.Host("ENV_TEST_HOST", "127.0.0.1"))
			require.ErrorContains(t, env.Err(), "ENV_TEST_HOST="+host+": "+want, host)
		}
	})

	// RATE_LIMITS=maybe used to be refused twice, once by each package
	// that reads it.
	t.Run("RefusesASettingOnce", func(t *testing.T) {
		t.Setenv("ENV_TEST_WAIT", "soon")
		var env config.Env
		env.Duration("ENV_TEST_WAIT", time.Second)
		env.Duration("ENV_TEST_WAIT", time.Second)
		require.Equal(t, 1, strings.Count(env.Err().Error(), "ENV_TEST_WAIT=soon"), env.Err())
	})

	t.Run("RefusesADurationAboveItsCeiling", func(t *testing.T) {
		t.Setenv("ENV_TEST_CEILING", "100000h")
		var env config.Env
		require.Zero(t, env.Duration("ENV_TEST_CEILING", time.Second))
		require.ErrorContains(t, env.Err(), "ENV_TEST_CEILING=100000h: must be at most 5m")
		t.Setenv("ENV_TEST_CEILING", "5m")
		env = config.Env{}
		require.Equal(t, 5*time.Minute, env.Duration("ENV_TEST_CEILING", time.Second))
		require.NoError(t, env.Err())
	})

	t.Run("RefusesAHostWithAPort", func(t *testing.T) {
		for _, host := range []string{"127.0.0.1:5000", ":5000", "[::1]", "http://api", "a host"} {
			t.Setenv("ENV_TEST_HOST", host)
			var env config.Env
			require.Empty(t, env.Host("ENV_TEST_HOST", "127.0.0.1"))
			require.ErrorContains(t, env.Err(), "ENV_TEST_HOST="+host+": not an IP address or host name", host)
		}
	})

	t.Run("ReadsAddressesURLsAndConnectionStrings", func(t *testing.T) {
		var env config.Env
		require.Empty(t, env.String("ENV_TEST_ADDR", ""), "unset means none")
		for _, addr := range []string{"127.0.0.1:9100", ":9100", "[::1]:0", "localhost:65535"} {
			t.Setenv("ENV_TEST_ADDR", addr)
			require.Equal(t, addr, env.String("ENV_TEST_ADDR", ""))
		}
		for _, u := range []string{"http://127.0.0.1:5000", "https://api.stripe.com", "smtp://mailer:pw@mail:587"} {
			t.Setenv("ENV_TEST_LINK", u)
			require.Equal(t, u, env.String("ENV_TEST_LINK", ""))
		}
		for _, dsn := range []string{"postgres://rr@db:5432/rides", "postgresql:///rides?host=/tmp", "host=db user=rr dbname=rides", " host = db"} {
			t.Setenv("ENV_TEST_DSN", dsn)
			require.Equal(t, dsn, env.String("ENV_TEST_DSN", ""))
		}
		require.NoError(t, env.Err())
	})

	t.Run("RefusesAMalformedAddressOrURLNamingIt", func(t *testing.T) {
		for _, addr := range []string{"garbage", "9100", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:metrics", "http://127.0.0.1:9100", "no such host:9100", "-x:9100"} {
			t.Setenv("ENV_TEST_ADDR", addr)
			var env config.Env
			require.Empty(t, env.String("ENV_TEST_ADDR", ""))
			require.ErrorContains(t, env.Err(), "ENV_TEST_ADDR="+addr+": not an address such as 127.0.0.1:9100", addr)
		}
		for _, u := range []string{"garbage", "127.0.0.1:5000", "localhost:5000", "http://", "/v1"} {
			t.Setenv("ENV_TEST_LINK", u)
			var env config.Env
			require.Empty(t, env.String("ENV_TEST_LINK", "http://default"))
			require.ErrorContains(t, env.Err(), "ENV_TEST_LINK="+u+": not a URL with a scheme and a host", u)
		}
		for _, dsn := range []string{"garbage", "db:5432", "mysql://db/rides"} {
			t.Setenv("ENV_TEST_DSN", dsn)
			var env config.Env
			require.Empty(t, env.String("ENV_TEST_DSN", ""))
			require.ErrorContains(t, env.Err(), "ENV_TEST_DSN="+dsn+": not a postgres:// URL or a key=value connection string", dsn)
		}
		t.Setenv("ENV_TEST_URL", "garbage")
		var env config.Env
		require.Empty(t, env.Required("ENV_TEST_URL"))
		require.ErrorContains(t, env.Err(), "ENV_TEST_URL=garbage: not a URL")
	})

	t.Run("MasksThePasswordOfARefusedURL", func(t *testing.T) {
		t.Setenv("ENV_TEST_LINK", "smtp://mailer:hunter2@")
		t.Setenv("ENV_TEST_DSN", "mysql://rr:hunter2@db/rides")
		t.Setenv("ENV_TEST_URL", "mailer:hunter2@@mail:587")
		var env config.Env
		env.String("ENV_TEST_LINK", "")
		env.String("ENV_TEST_DSN", "")
		env.Required("ENV_TEST_URL")
		err := env.Err()
		require.ErrorContains(t, err, "ENV_TEST_LINK=smtp://mailer:xxxxx@: not a URL")
		require.ErrorContains(t, err, "ENV_TEST_DSN=mysql://rr:xxxxx@db/rides: not a postgres:// URL")
		require.ErrorContains(t, err, "ENV_TEST_URL=[redacted]: not a URL")
		require.NotContains(t, err.Error(), "hunter2")
	})

	// IDEMPOTENCY_LOCK_TIMEOUT=1ns and STRIPE_TIMEOUT=1ns used to start.
	t.Run("RefusesADurationBelowItsFloor", func(t *testing.T) {
		for _, v := range []string{"1ns", "999ms"} {
			t.Setenv("ENV_TEST_FLOOR", v)
			var env config.Env
			require.Zero(t, env.Duration("ENV_TEST_FLOOR", time.Minute), "never the default")
			require.ErrorContains(t, env.Err(), "ENV_TEST_FLOOR="+v+": must be at least 1s", v)
		}
		t.Setenv("ENV_TEST_FLOOR", "1s")
		var env config.Env
		require.Equal(t, time.Second, env.Duration("ENV_TEST_FLOOR", time.Minute))
		require.NoError(t, env.Err())

		t.Setenv("ENV_TEST_FLOOR", "")
		env = config.Env{}
		env.Duration("ENV_TEST_FLOOR", time.Millisecond)
		require.ErrorContains(t, env.Err(), "ENV_TEST_FLOOR: the default 1ms is below the declared floor 1s", "the code's own default too")
	})

	t.Run("RefusesByARuleAcrossSettings", func(t *testing.T) {
		t.Setenv("ENV_TEST_LINK", "ftp://mailer:hunter2@x")
		var env config.Env
		env.String("ENV_TEST_LINK", "")
		require.NoError(t, env.Err())
		env.Refuse("ENV_TEST_LINK", "must be http or https")
		env.Refuse("ENV_TEST_UNSET", "never read")
		err := env.Err()
		require.ErrorContains(t, err, "ENV_TEST_LINK=ftp://mailer:xxxxx@x: must be http or https")
		require.ErrorContains(t, err, "ENV_TEST_UNSET is refused before it is read")
		require.NotContains(t, err.Error(), "hunter2")
	})

	// pgx reads a URL only by its exact prefix and the pairs only with
	// their quotes closed; anything else it refuses, quoting the string
	// back with its password masked only as well as it can guess.
	t.Run("RefusesAConnectionStringPgxWouldMisread", func(t *testing.T) {
		for _, dsn := range []string{
			"postgres//rr:hunter2@db/rides",
			"postgres:/rr:hunter2@db/rides",
			"Postgres://rr:hunter2@db/rides",
			"postgres://rr:hun ter2@db/rides",
			"postgres://rr:hunter2@db:port/rides",
			"postgres://rr:hunter2@db/rides%zz",
			"postgres://rr:5432?hunter2@db/rides",
			"postgres://rr:5432#hunter2@db/rides",
			"host=db password='hun ter2",
			"host=db password='hunter2\\'",
			"host=db password = 'hun ter2",
		} {
			t.Setenv("ENV_TEST_DSN", dsn)
			var env config.Env
			require.Empty(t, env.String("ENV_TEST_DSN", ""), dsn)
			err := env.Err()
			require.ErrorContains(t, err, "ENV_TEST_DSN=", dsn)
			require.ErrorContains(t, err, "not a ", dsn)
			require.NotContains(t, err.Error(), "hunter2", dsn)
			require.NotContains(t, err.Error(), "ter2", dsn)
		}
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
		env.Fraction("ENV_TEST_SHARE", 0.5)
		env.Bool("ENV_TEST_ON", false)
		err := env.Err()
		require.Error(t, err)
		for _, want := range []string{
			"ENV_TEST_URL must be set",
			"ENV_TEST_WAIT=soon: not a duration",
			"ENV_TEST_SIZE=big: not an integer",
			"ENV_TEST_SHARE=half: not a decimal number",
			"ENV_TEST_ON=maybe: not true or false",
		} {
			require.ErrorContains(t, err, want)
		}
	})
}

func TestLogger(t *testing.T) {
	t.Run("RefusesABadLevelOrFormat", func(t *testing.T) {
		t.Setenv("LOG_LEVEL", "loud")
		_, err := config.Logger(&config.Env{}, "test", io.Discard)
		require.ErrorContains(t, err, "LOG_LEVEL=loud")
		t.Setenv("LOG_LEVEL", "")
		t.Setenv("LOG_FORMAT", "xml")
		_, err = config.Logger(&config.Env{}, "test", io.Discard)
		require.ErrorContains(t, err, "LOG_FORMAT=xml")
	})
}
