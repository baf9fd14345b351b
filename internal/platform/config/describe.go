package config

import (
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
)

// redacted stands in for a secret's value.
const redacted = "[redacted]"

// Shown is the value as it may be logged or printed: a secret's value
// replaced, a URL's password masked.
func (r Read) Shown() string { return r.Show(r.Value) }

// Show returns value as it may be logged or printed: a secret's value
// replaced, a URL's password masked; an unset value stays empty.
func (s Setting) Show(value string) string {
	switch {
	case value == "":
		return ""
	case s.Secret:
		return redacted
	case s.Type == TypeURL || s.Type == TypeConnString:
		return redactURL(value)
	}
	return value
}

// passwordWord is password=... in a key/value connection string: quoted
// ('p q'), or unquoted, ending at the first white space that no
// backslash escapes (p\ q is one value, as libpq reads it; an & is part
// of it). passwordParam is password=... in a URL's query, which ends at
// the next & or white space.
var (
	passwordWord  = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|(?:[^\s\\]|\\.?)*)`)
	passwordParam = regexp.MustCompile(`(?i)(password\s*=\s*)([^\s&]*)`)
)

// redactURL masks the password in a URL (postgres://user:pw@host/db,
// smtp://user:pw@host, ?password=pw) or in a key/value connection string
// (password=pw).
func redactURL(v string) string {
	if keyValue.MatchString(v) {
		// Key=value pairs, whatever their values hold (a URL, an @):
		// nothing else to parse.
		return passwordWord.ReplaceAllString(v, "${1}xxxxx")
	}
	v = passwordParam.ReplaceAllString(v, "${1}xxxxx")
	u, err := url.Parse(v)
	if err != nil || u.Opaque != "" {
		if strings.Contains(v, "@") {
			// Unparseable, or no URL at all (mailer:pw@mail:587 parses
			// as the scheme mailer), yet it may hold user:password@.
			return redacted
		}
		return v
	}
	if _, ok := u.User.Password(); !ok {
		// As it was set: nothing to mask, and a value refused for its
		// form is shown as written (http://, not http:).
		return v
	}
	return u.Redacted()
}

// Attrs returns the settings read, with the values in effect, as log
// attributes named after the variables in lower case (completer_min_age),
// secrets redacted: what a process's start line says.
func (e *Env) Attrs() []slog.Attr {
	attrs := make([]slog.Attr, 0, len(e.reads))
	for _, r := range e.reads {
		attrs = append(attrs, slog.String(strings.ToLower(r.Name), r.Shown()))
	}
	return attrs
}

// WriteHelp writes reads as -help lists them, in the style of the flag
// package's usage: the variable, its type, default and unit, then what
// it changes.
func WriteHelp(w io.Writer, reads []Read) {
	for _, r := range reads {
		var facts []string
		facts = append(facts, string(r.Type))
		if r.Unit != "" {
			facts = append(facts, r.Unit)
		}
		switch {
		case r.Required:
			facts = append(facts, "required")
		case r.Default == "":
			facts = append(facts, "default unset")
		default:
			facts = append(facts, "default "+r.Show(r.Default))
		}
		if r.Zero != "" {
			facts = append(facts, "0: "+r.Zero)
		}
		if r.Secret {
			facts = append(facts, "secret")
		}
		fmt.Fprintf(w, "  %s (%s)\n    \t%s\n", r.Name, strings.Join(facts, ", "), r.Help)
		if r.Trades != "" {
			fmt.Fprintf(w, "    \tTrades: %s (docs/failures.md: %s)\n", r.Trades, r.Failures)
		}
	}
}
