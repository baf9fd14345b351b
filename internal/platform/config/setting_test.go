package config

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDeclarations(t *testing.T) {
	t.Parallel()

	t.Run("RefusesAnUndeclaredOrMistypedRead", func(t *testing.T) {
		t.Parallel()
		env := Describe()
		env.Duration("NEVER_DECLARED_ANYWHERE", 0)
		env.Int("LOG_LEVEL", 1)
		err := env.Err()
		require.ErrorContains(t, err, "NEVER_DECLARED_ANYWHERE is read but not declared")
		require.ErrorContains(t, err, "LOG_LEVEL is declared as a string but read as a integer")
	})

	t.Run("DescribeRecordsReadsAndDefaults", func(t *testing.T) {
		t.Parallel()
		env := Describe()
		env.String("LOG_LEVEL", "info")
		env.Bool(AllowUnknown, false)
		require.ErrorIs(t, env.Err(), ErrDescribed)
		reads := env.Reads()
		require.Len(t, reads, 2)
		require.Equal(t, "LOG_LEVEL", reads[0].Name)
		require.Equal(t, "info", reads[0].Default)
		require.Equal(t, "false", reads[1].Default)
	})

	t.Run("NamesTheNearestKnownSetting", func(t *testing.T) {
		t.Parallel()
		errs := Unknown([]string{"REAPER_MAX_AGES=24h", "COMPLETER_MIN_AEG=1m", "LOG_LEVEL=info", "API_PORT=5000", "HOME=/root", "GOFLAGS=-v"})
		require.Len(t, errs, 2, "API_PORT is another process's (make dev's); HOME and GOFLAGS have no project prefix")
		require.ErrorContains(t, errs[0], "REAPER_MAX_AGES is not a setting of any Rocket Rides process; did you mean REAPER_MAX_AGE?")
		require.ErrorContains(t, errs[1], "COMPLETER_MIN_AEG is not a setting of any Rocket Rides process; did you mean COMPLETER_MIN_AGE?")
	})

	// A shared environment holds other software's variables, whose first
	// words some of our settings happen to start with too.
	t.Run("LeavesOtherSoftwaresVariablesAlone", func(t *testing.T) {
		t.Parallel()
		errs := Unknown([]string{"DATABASE_PASSWORD=hunter2", "API_KEY=k", "LOG_FILE=/var/log/x", "MAX_JOBS=4",
			"STRIPE_WEBHOOK_SECRET=whsec_1", "TEST_SHARD=1", "DEBUG_PORT=1", "HOSTNAME=box"})
		require.Empty(t, errs)
	})

	t.Run("AnEmptyVariableIsUnset", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, Unknown([]string{"REAPER_MAX_AGES=", "COMPLETER_MIN_AEG="}))
	})

	t.Run("EveryPrefixIsOneOfOurSettings", func(t *testing.T) {
		t.Parallel()
		for _, p := range Prefixes() {
			require.True(t, slices.ContainsFunc(knownNames(), func(name string) bool { return strings.HasPrefix(name, p) }),
				"%s starts none of the project's settings", p)
		}
	})

	t.Run("RedactsSecrets", func(t *testing.T) {
		t.Parallel()
		url := Setting{Name: "X_URL", Type: TypeURL}
		require.Equal(t, "postgres://rr:xxxxx@db:5432/rides", url.Show("postgres://rr:hunter2@db:5432/rides"))
		require.NotContains(t, url.Show("host=db user=rr password=hunter2 dbname=rides"), "hunter2")
		require.NotContains(t, url.Show("postgres://db/rides?password=hunter2"), "hunter2")
		require.Equal(t, "postgres://db/rides", url.Show("postgres://db/rides"))
		require.Equal(t, "postgres://db/rides?password=xxxxx&sslmode=disable", url.Show("postgres://db/rides?password=hunter2&sslmode=disable"))
		dsn := Setting{Name: "X_DSN", Type: TypeConnString}
		for value, want := range map[string]string{
			`host=db password=p\ q dbname=rides`:    "host=db password=xxxxx dbname=rides",
			`host=db password='p q' dbname=rides`:   "host=db password=xxxxx dbname=rides",
			`host=db password='p\' q' dbname=rides`: "host=db password=xxxxx dbname=rides",
			`host=db password=p&q dbname=rides`:     "host=db password=xxxxx dbname=rides",
			`host=db PASSWORD = p\\ dbname=rides`:   "host=db PASSWORD = xxxxx dbname=rides",
			`host=db password=p\`:                   "host=db password=xxxxx",
			// A URL elsewhere in the string makes it no URL.
			`host=db password='se cret' application_name=http://x`: "host=db password=xxxxx application_name=http://x",
			`host=db password=se\ cret sslrootcert=/a://b`:         "host=db password=xxxxx sslrootcert=/a://b",
		} {
			require.Equal(t, want, dsn.Show(value), value)
		}
		require.NotContains(t, url.Show("mailer:hunter2@mail:587"), "hunter2", "no scheme: mailer is taken for one")
		require.Equal(t, "//rr:xxxxx@db/rides", url.Show("//rr:hunter2@db/rides"))
		require.Equal(t, "host=db password=xxxxx", Setting{Name: "X_DSN", Type: TypeConnString}.Show("host=db password=hunter2"))
		require.Equal(t, "[redacted]", Setting{Name: "X_KEY", Type: TypeString, Secret: true}.Show("sk_live_123"))
		require.Empty(t, Setting{Name: "X_KEY", Type: TypeString, Secret: true}.Show(""))
	})

	// DATABASE_URL='postgres//user:pw@host/db' used to print the
	// password; each shape here is one a hand can type.
	t.Run("MasksThePasswordInEveryMalformedShape", func(t *testing.T) {
		t.Parallel()
		dsn := Setting{Name: "X_DSN", Type: TypeConnString}
		link := Setting{Name: "X_URL", Type: TypeURL}
		for _, value := range []string{
			"postgres//rr:hunter2@db/rides",          // no colon after the scheme
			"postgres:/rr:hunter2@db/rides",          // one slash
			"postgres:rr:hunter2@db/rides",           // no slashes
			"rr:hunter2@db/rides",                    // no scheme
			"//rr:hunter2@db/rides",                  // no scheme, with slashes
			"postgres://rr:hunter2@db:port/rides",    // a port that is no number
			"postgres://rr:hun/ter2@db/rides",        // a / in the password
			"postgres://rr:5432?hunter2@db/rides",    // a ? in the password, reading as a port and a query
			"postgres://rr:5432#hunter2@db/rides",    // a # in the password
			"postgres://rr:hun ter2@db/rides",        // a space in the password
			"postgres://rr:hunter2@db/rides%zz",      // a bad escape
			" postgres://rr:hunter2@db/rides",        // a leading space
			"postgres://rr:hunter2@db/rides\n",       // a control character
			"postgres://rr:hunter2@[::1/rides",       // an unclosed IPv6 host
			"postgres://rr:hun@ter2@db/rides",        // an @ in the password
			"postgres://db/rides?pass%77ord=hunter2", // an escaped parameter name
			"postgres://db/rides?sslpassword=hunter2",
			"postgres://db/rides?sslmode=require&password='hun ter2'",
			"host=db password='hun ter2",            // a quote never closed
			"host=db password='hun\\' ter2'",        // an escaped quote
			"host=db password=hunter2\\",            // a trailing backslash
			"dbname=postgres://rr:hunter2@db/rides", // a URL as a value
			"host=db sslpassword=hunter2",
		} {
			for _, s := range []Setting{dsn, link} {
				shown := s.Show(value)
				require.NotContains(t, shown, "hunter2", "%s: %q", s.Type, value)
				require.NotContains(t, shown, "ter2", "%s: %q", s.Type, value)
			}
		}
		// Without an @ there is no password to mask: a mistyped value is
		// shown as written, so that the mistake can be seen.
		require.Equal(t, "postgres//db/rides", dsn.Show("postgres//db/rides"))
		require.Equal(t, "postgres://db:port/rides", dsn.Show("postgres://db:port/rides"))
	})

	// A floor is there for a reason the reader of -help and
	// docs/configuration.md must see: the Help that declares it names it.
	t.Run("RefusesAFloorItsHelpDoesNotName", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, Setting{Name: "X_WAIT", Type: TypeDuration, Min: time.Second, Help: "at least 1s: below, it breaks"}.validate())
		require.ErrorContains(t, Setting{Name: "X_WAIT", Type: TypeDuration, Min: time.Second, Help: "a wait"}.validate(),
			"X_WAIT: Help must name the floor and say why it is there (at least 1s)")
		require.ErrorContains(t, Setting{Name: "X_SIZE", Type: TypeInt, Min: time.Second, Help: "at least 1s"}.validate(), "Min is a positive floor, for a duration")
		require.ErrorContains(t, Setting{Name: "X_WAIT", Type: TypeDuration, Min: time.Second, Zero: "none", Help: "at least 1s"}.validate(), "cannot honour 0")
	})

	t.Run("ShowsDurationsAsWritten", func(t *testing.T) {
		t.Parallel()
		for d, want := range map[string]string{"5m0s": "5m", "72h0m0s": "72h", "1m30s": "1m30s", "1h30m0s": "1h30m", "500ms": "500ms"} {
			dur, err := time.ParseDuration(d)
			require.NoError(t, err)
			require.Equal(t, want, FormatDuration(dur))
		}
	})
}
