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
// ('p q', to the end of the string when the quote is never closed), or
// unquoted, ending at the first white space that no backslash escapes
// (p\ q is one value, as libpq reads it; an & is part of it).
// passwordParam is password=... in a URL's query, which ends at the next
// & or white space. Both match sslpassword too (the password of a
// client certificate's key), as pgx reads it.
var (
	passwordWord  = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.?)*(?:'|$)|(?:[^\s\\]|\\.?)*)`)
	passwordQuote = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.?)*(?:'|$))`)
	passwordParam = regexp.MustCompile(`(?i)(password\s*=\s*)([^\s&]*)`)
	// userinfo is user:password@ after a scheme's //, anywhere in a
	// key/value string (a URL given as some parameter's value); the
	// password runs to the last @ of its word, as url.Parse reads one.
	userinfo = regexp.MustCompile(`(://[^\s:/@]*:)\S*@`)
)

// redactURL masks the password in a URL (postgres://user:pw@host/db,
// smtp://user:pw@host, ?password=pw) or in a key/value connection string
// (password=pw).
//
// A value that is not a well-formed URL is masked by shape, since no
// parser says where its password ends: one that holds an @ anywhere
// (postgres//user:pw@host/db, postgres:/user:pw@host, user:pw@host,
// a password holding a / or a ? or a space) may hold user:password@, and
// is shown as [redacted] whole. Without an @ there is no userinfo, and
// the value is shown as written, so that a mistyped host or scheme can
// be seen.
func redactURL(v string) string {
	if keyValue.MatchString(v) {
		// Key=value pairs, whatever their values hold (a URL, an @):
		// nothing else to parse.
		v = passwordWord.ReplaceAllString(v, "${1}xxxxx")
		return userinfo.ReplaceAllString(v, "${1}xxxxx@")
	}
	v = passwordQuote.ReplaceAllString(v, "${1}xxxxx")
	v = passwordParam.ReplaceAllString(v, "${1}xxxxx")
	u, err := url.Parse(v)
	if err != nil || !hierarchical(v, u) {
		if strings.Contains(v, "@") {
			return redacted
		}
		return v
	}
	if q := redactQuery(u.RawQuery); q != u.RawQuery {
		u.RawQuery = q
		v = u.String()
	}
	if u.User == nil && strings.Contains(v, "@") {
		// An @ but no user: a password holding a ? or a #
		// (postgres://rr:5432?pw@db) reads as a port and a query.
		return redacted
	}
	if _, ok := u.User.Password(); !ok {
		// As it was set: nothing to mask, and a value refused for its
		// form is shown as written (http://, not http:).
		return v
	}
	return u.Redacted()
}

// hierarchical reports whether v, parsed as u, is scheme://authority...
// or //authority...: the only forms whose userinfo url.Parse finds.
func hierarchical(v string, u *url.URL) bool {
	if u.Opaque != "" {
		return false
	}
	rest := v
	if u.Scheme != "" {
		rest = v[len(u.Scheme)+1:]
	}
	return strings.HasPrefix(rest, "//")
}

// redactQuery masks the value of every password or sslpassword
// parameter of a URL's query, its name percent-decoded as pgx decodes it
// (pass%77ord is password).
func redactQuery(raw string) string {
	if raw == "" {
		return raw
	}
	pairs := strings.Split(raw, "&")
	for i, pair := range pairs {
		key, _, ok := strings.Cut(pair, "=")
		name, err := url.QueryUnescape(key)
		if ok && (err != nil || strings.EqualFold(name, "password") || strings.EqualFold(name, "sslpassword")) {
			pairs[i] = key + "=xxxxx"
		}
	}
	return strings.Join(pairs, "&")
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
