package config

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// Type is what a setting's value is, and so which Env method reads it.
type Type string

// The types of setting, each with the Env methods that read it.
const (
	TypeString     Type = "string"            // String, Required
	TypeURL        Type = "URL"               // String, Required: with a scheme and a host; a password in it is redacted in logs
	TypeConnString Type = "connection string" // String, Required: a postgres:// URL or key=value pairs; a password in it is redacted in logs
	TypeAddress    Type = "address"           // String: host:port of a listener, unset meaning none
	TypeDuration   Type = "duration"          // Duration, DurationOrZero: a Go duration such as 90s or 5m
	TypeInt        Type = "integer"           // Int, IntOrZero, Int32OrZero
	TypeFraction   Type = "fraction"          // Fraction, FractionOrZero: a share such as 0.25
	TypeBool       Type = "boolean"           // Bool: true or false
	TypePort       Type = "port"              // Port: a TCP port, 0 for any free one
	TypeHost       Type = "host"              // Host: an IP address or host name, without a port
)

// Setting declares one environment variable: what it is and what it
// changes. A package declares the settings it owns with Declare, next to
// the code that uses them; Env reads only declared settings, so every
// setting a process reads is one that its -help, its start line and
// docs/configuration.md describe. The default is not declared: it is what
// the reading code passes to Env, recorded as it reads, so the one written
// in the code is the one documented.
type Setting struct {
	// Name is the variable, such as COMPLETER_MIN_AGE. Required.
	Name string

	// Type says how the value is read. Required.
	Type Type

	// Unit is what a number counts (keys, rides, connections). Optional;
	// durations, fractions and ports need none.
	Unit string

	// Help says in one line what the setting changes. Required.
	Help string

	// Zero says what 0 means for a number that honours it (read with an
	// OrZero method, or Port). Empty for a number that refuses 0.
	Zero string

	// Min is the least value a duration accepts, for a setting below
	// which the project's guarantees do not hold (a lock that expires
	// before an ordinary request can finish): a smaller value stops the
	// process, naming the setting and its floor. Help says why the floor
	// is where it is, and names it ("at least 1s"). Zero sets no floor.
	Min time.Duration

	// Max is the most a duration accepts, for a setting where more is
	// never meant (a Stripe attempt of 100000h): a larger value stops the
	// process, naming the setting and its ceiling. Help names it ("at
	// most 5m"). Zero sets no ceiling.
	Max time.Duration

	// Required settings have no default: the process does not start
	// without them (read with Env.Required).
	Required bool

	// Secret settings never reach a log line or -help's output with
	// their value. (TypeURL and TypeConnString values are logged with the
	// password redacted instead.)
	Secret bool

	// Trades, for a setting that changes one of the project's
	// guarantees, says what raising or lowering it gives up, and
	// Failures names the section of docs/failures.md it touches. Both or
	// neither.
	Trades   string
	Failures string
}

// Prefix is the name's first word with its underscore (COMPLETER_ of
// COMPLETER_MIN_AGE) when that word is one of the project's own
// (Prefixes), or "": a one-word name such as PORT, and one whose first
// word other software uses too (DATABASE_URL, LOG_LEVEL, STRIPE_API_KEY).
func (s Setting) Prefix() string {
	if i := strings.IndexByte(s.Name, '_'); i > 0 && slices.Contains(prefixes, s.Name[:i+1]) {
		return s.Name[:i+1]
	}
	return ""
}

var (
	declaredMu sync.Mutex
	declared   = map[string]Setting{}

	settingName = regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$`)
)

// Declare declares the settings a package owns and returns them. Call it
// once per package, in a package-level variable next to the code that
// reads them:
//
//	var Settings = config.Declare(
//		config.Setting{Name: "REAPER_BATCH_SIZE", Type: config.TypeInt, Unit: "keys",
//			Help: "keys deleted per statement"},
//	)
//
// It panics on a malformed declaration or a name declared twice: both
// are mistakes in the code, found as soon as any binary or test linking
// the package starts.
func Declare(settings ...Setting) []Setting {
	declaredMu.Lock()
	defer declaredMu.Unlock()
	for _, s := range settings {
		if err := s.validate(); err != nil {
			panic(err)
		}
		if _, dup := declared[s.Name]; dup {
			panic(fmt.Sprintf("config: %s is declared twice; one package owns each setting", s.Name))
		}
		declared[s.Name] = s
	}
	return settings
}

func (s Setting) validate() error {
	switch {
	case !settingName.MatchString(s.Name):
		return fmt.Errorf("config: setting name %q is not UPPER_SNAKE_CASE", s.Name)
	case s.Help == "":
		return fmt.Errorf("config: %s: Help is required", s.Name)
	case (s.Trades == "") != (s.Failures == ""):
		return fmt.Errorf("config: %s: Trades and Failures go together", s.Name)
	case s.Required && s.Type != TypeString && s.Type != TypeURL && s.Type != TypeConnString:
		return fmt.Errorf("config: %s: only a string, URL or connection string setting can be required", s.Name)
	case s.Type == TypePort && s.Zero == "":
		return fmt.Errorf("config: %s: a port says what 0 means (Zero)", s.Name)
	case s.Zero != "" && s.Type != TypePort && s.Type != TypeDuration && s.Type != TypeInt && s.Type != TypeFraction:
		return fmt.Errorf("config: %s: Zero is for numbers", s.Name)
	case s.Min < 0 || s.Min > 0 && s.Type != TypeDuration:
		return fmt.Errorf("config: %s: Min is a positive floor, for a duration", s.Name)
	case s.Min > 0 && s.Zero != "":
		return fmt.Errorf("config: %s: a duration with a floor (Min) cannot honour 0 (Zero)", s.Name)
	case s.Min > 0 && !strings.Contains(s.Help, "at least "+FormatDuration(s.Min)):
		return fmt.Errorf("config: %s: Help must name the floor and say why it is there (at least %s)", s.Name, FormatDuration(s.Min))
	case s.Max < 0 || s.Max > 0 && (s.Type != TypeDuration || s.Max <= s.Min):
		return fmt.Errorf("config: %s: Max is a positive ceiling above Min, for a duration", s.Name)
	case s.Max > 0 && !strings.Contains(s.Help, "at most "+FormatDuration(s.Max)):
		return fmt.Errorf("config: %s: Help must name the ceiling (at most %s)", s.Name, FormatDuration(s.Max))
	}
	switch s.Type {
	case TypeString, TypeURL, TypeConnString, TypeAddress, TypeDuration, TypeInt, TypeFraction, TypeBool, TypePort, TypeHost:
		return nil
	}
	return fmt.Errorf("config: %s: unknown Type %q", s.Name, s.Type)
}

// Lookup returns the declaration of name, if a package linked into this
// binary declares it.
func Lookup(name string) (Setting, bool) {
	declaredMu.Lock()
	defer declaredMu.Unlock()
	s, ok := declared[name]
	return s, ok
}

// Declared returns every setting declared in this binary, by name.
func Declared() []Setting {
	declaredMu.Lock()
	defer declaredMu.Unlock()
	return slices.SortedFunc(maps.Values(declared), func(a, b Setting) int { return strings.Compare(a.Name, b.Name) })
}
