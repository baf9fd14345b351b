package config

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Env reads a process's settings one after the other and keeps every
// error, so that a process with several bad settings names them all at
// once instead of one per restart. Each method returns the zero value for
// a bad setting; check Err before using any of them.
//
// Each method returns def when the variable is unset or empty. Its name
// says what it does with zero: Duration, Int and Fraction refuse it, and
// their OrZero forms (and Port) honour it, for the settings where zero
// means something and the caller hands it on as such.
//
// Env reads only declared settings (Declare), each with the method its
// Type names, and records every read: its declaration, the default the
// code passed and the value in effect. That record is what a process's
// -help lists and what its start line logs (Reads, Attrs), so neither can
// leave out a setting the code reads. A read of an undeclared setting is
// an error, found by the first test or start of the process.
type Env struct {
	errs     []error
	reads    []Read
	describe bool
}

// Read is one setting as a process read it.
type Read struct {
	Setting
	// Default is the default the code passed, as it would be written in
	// the environment; "" for none.
	Default string
	// Value is the value in effect: the environment's, or Default.
	Value string
}

// ErrDescribed is Err's answer in an Env made by Describe once every read
// succeeded: a build step stops there, before it opens anything.
var ErrDescribed = errors.New("config: settings described, nothing built")

// Describe returns an Env that reads nothing from the environment: every
// method returns its default and records the read, and Err returns
// ErrDescribed. A process's build step run with it lists the settings the
// process reads, with their defaults, without opening anything.
func Describe() *Env { return &Env{describe: true} }

// read records that name is read as one of types, with default def, and
// returns its value in the environment ("" when unset, and always in an
// Env made by Describe). zero says whether the caller honours 0.
func (e *Env) read(name string, zero bool, def string, types ...Type) string {
	s, ok := Lookup(name)
	switch {
	case !ok:
		e.errs = append(e.errs, fmt.Errorf("%s is read but not declared: declare it (config.Declare) in the package that uses it", name))
		s = Setting{Name: name, Type: types[0], Help: "(undeclared)"}
	case !slices.Contains(types, s.Type):
		e.errs = append(e.errs, fmt.Errorf("%s is declared as a %s but read as a %s", name, s.Type, types[0]))
	case zero && s.Zero == "" && s.Type != TypeString:
		e.errs = append(e.errs, fmt.Errorf("%s is read honouring 0 but its declaration does not say what 0 means (Zero)", name))
	case !zero && s.Zero != "":
		e.errs = append(e.errs, fmt.Errorf("%s is declared with a meaning for 0 but read refusing it", name))
	}
	v := ""
	if !e.describe {
		v = os.Getenv(name)
	}
	r := Read{Setting: s, Default: def, Value: def}
	if v != "" {
		r.Value = v
	}
	if i := slices.IndexFunc(e.reads, func(r Read) bool { return r.Name == name }); i >= 0 {
		e.reads[i] = r
	} else {
		e.reads = append(e.reads, r)
	}
	return v
}

// Reads returns the settings read so far, in the order first read.
func (e *Env) Reads() []Read { return slices.Clone(e.reads) }

// String returns $name, or def when it is unset or empty. A URL, a
// connection string or an address is refused, naming the variable, when
// it does not have the form its type says (METRICS_ADDR=9100 would
// otherwise start the process and fail once it listens, naming nothing).
func (e *Env) String(name, def string) string {
	v := e.read(name, false, def, TypeString, TypeURL, TypeConnString, TypeAddress)
	if v == "" {
		return def
	}
	return e.checkForm(name, v)
}

// Required returns $name, or records an error naming it when it is unset
// or empty. A URL or a connection string is checked as String checks it.
func (e *Env) Required(name string) string {
	v := e.read(name, false, "", TypeString, TypeURL, TypeConnString)
	if s, ok := Lookup(name); ok && !s.Required {
		e.errs = append(e.errs, fmt.Errorf("%s is read as required but not declared Required", name))
	}
	if v == "" {
		if !e.describe {
			e.errs = append(e.errs, fmt.Errorf("%s must be set", name))
		}
		return ""
	}
	return e.checkForm(name, v)
}

// checkForm returns $name's value v, or records an error naming it and
// returns "" when v does not have the form of the setting's type.
func (e *Env) checkForm(name, v string) string {
	s, _ := Lookup(name) // an undeclared setting is refused by read
	var why string
	switch s.Type {
	case TypeAddress:
		why = addressForm(v)
	case TypeURL:
		why = urlForm(v)
	case TypeConnString:
		why = connStringForm(v)
	}
	if why != "" {
		e.fail(name, v, why)
		return ""
	}
	return v
}

// addressForm says what is wrong with v as the host:port of a listener,
// or "". The host may be empty (:9100, every interface); the port must
// be a number, 0 asking for any free one.
func addressForm(v string) string {
	const want = "not an address such as 127.0.0.1:9100 or :9100 (host:port, the port from 0 to 65535)"
	host, port, err := net.SplitHostPort(v)
	if err != nil || (host != "" && !validHost(host)) {
		return want
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > math.MaxUint16 {
		return want
	}
	return ""
}

// validHost says whether host is an IP address or a host name.
func validHost(host string) bool { return net.ParseIP(host) != nil || hostName.MatchString(host) }

// urlForm says what is wrong with v as a URL, or "": it needs a scheme
// and a host (http://127.0.0.1:5000, smtp://user:pw@mail:587).
func urlForm(v string) string {
	u, err := url.Parse(v)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "not a URL with a scheme and a host, such as http://127.0.0.1:5000"
	}
	return ""
}

// keyValue is the start of a key=value connection string (host=db ...).
var keyValue = regexp.MustCompile(`^\s*[A-Za-z_]+\s*=`)

// connStringForm says what is wrong with v as a Postgres connection
// string, or "": a postgres:// (or postgresql://) URL, whose host may be
// empty (a Unix socket, or libpq's default), or key=value pairs, read as
// pgx reads them: a URL only by those exact prefixes (postgres:/db or
// Postgres://db is no URL to pgx, and fails as key=value pairs), and the
// pairs with their quotes closed. Whatever pgx would fail to read is
// refused here, by name and with its password masked, rather than by pgx,
// which quotes the string back masked only as well as it can guess.
func connStringForm(v string) string {
	const want = "not a postgres:// URL or a key=value connection string (host=... dbname=...)"
	if keyValue.MatchString(v) {
		if why := keyValueForm(v); why != "" {
			return "not a key=value connection string: " + why
		}
		return ""
	}
	if !strings.HasPrefix(v, "postgres://") && !strings.HasPrefix(v, "postgresql://") {
		return want
	}
	// An @ where url.Parse finds no user (postgres://rr:5432?pw@db/rides)
	// is read otherwise by pgx, which takes all before the @ for the
	// user and password: refused, as ambiguous.
	if u, err := url.Parse(v); err != nil || u.User == nil && strings.Contains(v, "@") || strings.ContainsAny(v, " \t\n\r\x00") {
		return "not a well-formed postgres:// URL (a password with / ? # @ % or a space in it must be percent-encoded)"
	}
	return ""
}

// keyValueForm says what is wrong with v as libpq's key=value pairs, or
// "": each pair a keyword, =, and a value that is either a run of
// characters other than white space (a backslash escaping the next) or a
// quoted string ('...', a backslash escaping the next character) that is
// closed.
func keyValueForm(v string) string {
	if strings.IndexByte(v, 0) >= 0 {
		return "a NUL byte"
	}
	const space = " \t\n\r\v\f"
	s := strings.TrimLeft(v, space)
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return "a word without = after it"
		}
		if key := strings.Trim(s[:eq], space); key == "" || strings.ContainsAny(key, space) {
			return "a keyword missing or holding a space"
		}
		s = strings.TrimLeft(s[eq+1:], space)
		if strings.HasPrefix(s, "'") {
			end := 1
			for ; end < len(s) && s[end] != '\''; end++ {
				if s[end] == '\\' {
					end++
				}
			}
			if end >= len(s) {
				return "a quoted value that is never closed"
			}
			s = s[end+1:]
		} else {
			end := 0
			for ; end < len(s) && !strings.ContainsRune(space, rune(s[end])); end++ {
				if s[end] == '\\' {
					end++
				}
			}
			s = s[min(end, len(s)):]
		}
		s = strings.TrimLeft(s, space)
	}
	return ""
}

// Duration parses $name as a positive Go duration ("90s", "5m"), or
// returns def. Zero and negative durations are refused, and so is one
// below the setting's declared floor (Setting.Min) or above its ceiling
// (Setting.Max).
func (e *Env) Duration(name string, def time.Duration) time.Duration {
	d, ok := e.duration(name, def, false)
	switch s, _ := Lookup(name); {
	case ok && d <= 0:
		e.fail(name, os.Getenv(name), "must be positive")
		return 0
	case ok && d < s.Min:
		e.fail(name, os.Getenv(name), "must be at least "+FormatDuration(s.Min)+" (-help says why)")
		return 0
	case ok && s.Max > 0 && d > s.Max:
		e.fail(name, os.Getenv(name), "must be at most "+FormatDuration(s.Max)+" (-help says why)")
		return 0
	case !ok && d != 0 && d < s.Min:
		e.errs = append(e.errs, fmt.Errorf("%s: the default %s is below the declared floor %s", name, FormatDuration(def), FormatDuration(s.Min)))
		return 0
	}
	return d
}

// DurationOrZero is Duration for a setting where zero means something:
// zero is returned as it is, negative durations are refused.
func (e *Env) DurationOrZero(name string, def time.Duration) time.Duration {
	d, ok := e.duration(name, def, true)
	if ok && d < 0 {
		e.fail(name, os.Getenv(name), "must not be negative")
		return 0
	}
	return d
}

func (e *Env) duration(name string, def time.Duration, zero bool) (d time.Duration, set bool) {
	v := e.read(name, zero, FormatDuration(def), TypeDuration)
	if v == "" {
		return def, false
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		e.fail(name, v, "not a duration such as 90s or 5m")
		return 0, false
	}
	return d, true
}

// FormatDuration writes d as a person would set it: 5m, 72h, 1m30s, not
// 5m0s or 72h0m0s.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Int parses $name as a positive integer, or returns def. Zero and
// negative numbers are refused.
func (e *Env) Int(name string, def int) int {
	n, ok := e.int(name, def, false, TypeInt)
	if ok && n <= 0 {
		e.fail(name, os.Getenv(name), "must be positive")
		return 0
	}
	return n
}

// IntOrZero is Int for a setting where zero means something: zero is
// returned as it is, negative numbers are refused.
func (e *Env) IntOrZero(name string, def int) int {
	n, ok := e.int(name, def, true, TypeInt)
	if ok && n < 0 {
		e.fail(name, os.Getenv(name), "must not be negative")
		return 0
	}
	return n
}

// Int32OrZero is IntOrZero for a setting handed on as an int32 (pgx's
// pool size): a number above 2147483647 is refused, where converting it
// would wrap it around (4294967297 becoming 1).
func (e *Env) Int32OrZero(name string, def int32) int32 {
	n := e.IntOrZero(name, int(def))
	if n > math.MaxInt32 {
		e.fail(name, os.Getenv(name), fmt.Sprintf("must be at most %d", math.MaxInt32))
		return 0
	}
	return int32(n)
}

// Port parses $name as a TCP port, or returns def. Zero is honoured: it
// asks for any free port, which the process logs once it listens.
func (e *Env) Port(name string, def int) int {
	n, ok := e.int(name, def, true, TypePort)
	if ok && (n < 0 || n > math.MaxUint16) {
		e.fail(name, os.Getenv(name), "must be a port number from 0 (any free port) to 65535")
		return 0
	}
	return n
}

// Host returns $name, the host a listener binds to (an IP address such as
// 127.0.0.1, 0.0.0.0 or ::1, or a host name), or def. A value with a port
// is refused: the port is a setting of its own. So is a host the listener
// could not bind: a name that does not resolve, or an address that is not
// this machine's, refused here by the setting's name rather than later by
// the listener's address.
func (e *Env) Host(name, def string) string {
	v := e.read(name, false, def, TypeHost)
	if v == "" {
		return def
	}
	if !validHost(v) {
		e.fail(name, v, "not an IP address or host name such as 127.0.0.1 or 0.0.0.0 (without a port)")
		return ""
	}
	if why := notLocal(v); why != "" && !e.describe {
		e.fail(name, v, why+": set an address of this machine, such as 127.0.0.1 or 0.0.0.0")
		return ""
	}
	return v
}

// hostLookupTimeout bounds Host's look-up of a name.
const hostLookupTimeout = 5 * time.Second

// notLocal says why a listener cannot bind host, an IP address or a name:
// it does not resolve, or none of its addresses is this machine's (any of
// 127.0.0.0/8 and ::1, an unspecified address, or an interface's). It is
// empty when one is.
func notLocal(host string) string {
	addrs := []netip.Addr{}
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = append(addrs, ip)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), hostLookupTimeout)
		defer cancel()
		if addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil || len(addrs) == 0 {
			return "the name does not resolve"
		}
	}
	own := map[netip.Addr]bool{}
	if ifaddrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range ifaddrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				own[p.Addr()] = true
			}
		}
	}
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		if a.IsLoopback() || a.IsUnspecified() || own[a] {
			return ""
		}
	}
	if addrs[0].String() != host {
		return fmt.Sprintf("it resolves to %s, not an address of this machine", addrs[0])
	}
	return "not an address of this machine"
}

// hostName is a DNS name as RFC 1123 allows it.
var hostName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$`)

func (e *Env) int(name string, def int, zero bool, t Type) (n int, set bool) {
	v := e.read(name, zero, strconv.Itoa(def), t)
	if v == "" {
		return def, false
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		e.fail(name, v, "not an integer")
		return 0, false
	}
	return n, true
}

// Fraction parses $name as a share above 0 and at most 1, such as 0.25,
// or returns def. Zero is refused.
func (e *Env) Fraction(name string, def float64) float64 {
	f, ok := e.float(name, def, false)
	if ok && (f <= 0 || f > 1) {
		e.fail(name, os.Getenv(name), "must be above 0 and at most 1")
		return 0
	}
	return f
}

// FractionOrZero is Fraction for a setting where zero means something:
// it accepts 0 to 1.
func (e *Env) FractionOrZero(name string, def float64) float64 {
	f, ok := e.float(name, def, true)
	if ok && (f < 0 || f > 1) {
		e.fail(name, os.Getenv(name), "must be from 0 to 1")
		return 0
	}
	return f
}

func (e *Env) float(name string, def float64, zero bool) (f float64, set bool) {
	v := e.read(name, zero, strconv.FormatFloat(def, 'g', -1, 64), TypeFraction)
	if v == "" {
		return def, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		e.fail(name, v, "not a decimal number such as 0.25")
		return 0, false
	}
	return f, true
}

// Bool parses $name as a boolean (true/false/1/0), or returns def.
func (e *Env) Bool(name string, def bool) bool {
	v := e.read(name, false, strconv.FormatBool(def), TypeBool)
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.fail(name, v, "not true or false")
		return false
	}
	return b
}

// Refuse records that the value in effect of name, a setting read
// already, is refused, and why: for a rule that holds across settings
// (STRIPE_KEY_RETENTION above 24h is refused unless STRIPE_API_BASE is a
// stand-in), which no one setting's declaration can state. The error
// names name and shows its value as the start line would.
func (e *Env) Refuse(name, why string) {
	i := slices.IndexFunc(e.reads, func(r Read) bool { return r.Name == name })
	if i < 0 {
		e.errs = append(e.errs, fmt.Errorf("%s is refused before it is read: read it first", name))
		return
	}
	if e.describe {
		// Describe reads defaults only; a rule that refuses them is
		// the code's mistake, found by the first -help.
		e.errs = append(e.errs, fmt.Errorf("%s=%s (its default): %s", name, e.reads[i].Shown(), why))
		return
	}
	e.fail(name, e.reads[i].Value, why)
}

// Err is every error met so far, joined, or nil. In an Env made by
// Describe it is ErrDescribed when every read was of a declared setting.
func (e *Env) Err() error {
	if e.describe && len(e.errs) == 0 {
		return ErrDescribed
	}
	return errors.Join(e.errs...)
}

// fail records that $name=value is refused, and why. The value is
// repeated as the start line would show it: a secret's not at all, a
// URL's password masked.
func (e *Env) fail(name, value, why string) {
	if s, ok := Lookup(name); ok {
		value = s.Show(value)
	}
	err := fmt.Errorf("%s=%s: %s", name, value, why)
	// Two packages that read one setting (RATE_LIMITS) refuse it alike:
	// once is enough.
	if slices.ContainsFunc(e.errs, func(had error) bool { return had.Error() == err.Error() }) {
		return
	}
	e.errs = append(e.errs, err)
}
