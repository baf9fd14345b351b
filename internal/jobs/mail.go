package jobs

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/wneessen/go-mail"
)

// DefaultFrom is the sender of receipts unless configured otherwise.
const DefaultFrom = "Rocket Rides <receipts@rocketrides.local>"

// Message is one plain-text email.
type Message struct {
	// ID is the Message-ID without its angle brackets. Receipts derive it
	// from the ride, so that a message sent twice is recognisably one.
	ID      string
	To      string
	Subject string
	Date    time.Time
	Body    string
}

// Mailer delivers messages. Send returning nil means the message was
// handed over for delivery; an error means it may or may not have been.
type Mailer interface {
	Send(ctx context.Context, msg *Message) error
}

// build renders msg as an RFC 5322 message from from.
func build(from string, msg *Message) (*mail.Msg, error) {
	m := mail.NewMsg()
	if err := m.From(from); err != nil {
		return nil, fmt.Errorf("set From %q: %w", from, err)
	}
	if err := m.To(msg.To); err != nil {
		return nil, fmt.Errorf("set To %q: %w", msg.To, err)
	}
	m.Subject(msg.Subject)
	m.SetDateWithValue(msg.Date)
	m.SetMessageIDWithValue(msg.ID)
	m.SetBodyString(mail.TypeTextPlain, msg.Body)
	return m, nil
}

// SMTPMailer sends messages through an SMTP server.
type SMTPMailer struct {
	from   string
	client *mail.Client
}

// NewSMTPMailer returns a mailer for the server at rawURL:
//
//	smtp://[user:pass@]host[:port]    STARTTLS when the server offers it (port 25 by default)
//	smtps://[user:pass@]host[:port]   TLS from the first byte (port 465 by default)
//
// Plain smtp:// suits local mail catchers such as maildev, which offer no
// TLS at all.
func NewSMTPMailer(rawURL, from string) (*SMTPMailer, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parse SMTP URL: %w", err)
	}
	var opts []mail.Option
	switch u.Scheme {
	case "smtp":
		opts = append(opts, mail.WithTLSPortPolicy(mail.TLSOpportunistic))
	case "smtps":
		opts = append(opts, mail.WithSSLPort(false))
	default:
		return nil, fmt.Errorf("SMTP URL scheme must be smtp or smtps, got %q", u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("SMTP URL has no host")
	}
	if p := u.Port(); p != "" {
		port, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("SMTP URL port %q: %w", p, err)
		}
		opts = append(opts, mail.WithPort(port))
	}
	if u.User != nil {
		password, _ := u.User.Password()
		// The first mechanism the server offers, strongest first. PLAIN
		// and LOGIN send the password as is, so go-mail allows them only
		// over TLS or to localhost (a local mail catcher).
		opts = append(opts,
			mail.WithOpportunisticSMTPAuth(
				mail.SMTPAuthSCRAMSHA256, mail.SMTPAuthSCRAMSHA1, mail.SMTPAuthCramMD5,
				mail.SMTPAuthPlain, mail.SMTPAuthLogin,
			),
			mail.WithUsername(u.User.Username()),
			mail.WithPassword(password),
		)
	}
	opts = append(opts, mail.WithTimeout(30*time.Second))
	client, err := mail.NewClient(u.Hostname(), opts...)
	if err != nil {
		return nil, fmt.Errorf("create SMTP client for %s: %w", u.Host, err)
	}
	// A bad sender would fail every send; refuse it at startup instead.
	if err := mail.NewMsg().From(from); err != nil {
		return nil, fmt.Errorf("receipt sender %q: %w", from, err)
	}
	return &SMTPMailer{from: from, client: client}, nil
}

// Send delivers msg over one SMTP connection, opened and closed for it.
func (m *SMTPMailer) Send(ctx context.Context, msg *Message) error {
	built, err := build(m.from, msg)
	if err != nil {
		return fmt.Errorf("build message %s: %w", msg.ID, err)
	}
	if err := m.client.DialAndSendWithContext(ctx, built); err != nil {
		return fmt.Errorf("send message %s via SMTP: %w", msg.ID, err)
	}
	return nil
}

// DirMailer "sends" a message by writing it as an .eml file into a
// directory: the mail catcher for development and tests, when no SMTP
// server is configured.
type DirMailer struct {
	from string
	dir  string
}

// NewDirMailer returns a mailer writing into dir, which it creates.
func NewDirMailer(dir, from string) (*DirMailer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create mail directory: %w", err)
	}
	// A bad sender would fail every send; refuse it at startup instead.
	if err := mail.NewMsg().From(from); err != nil {
		return nil, fmt.Errorf("receipt sender %q: %w", from, err)
	}
	return &DirMailer{from: from, dir: dir}, nil
}

// Send writes msg to <dir>/<Message-ID>.eml. The file is named after the
// Message-ID so that sending the same message again replaces it rather
// than adding a copy, and it appears whole or not at all: written to a
// temporary file, synced, then renamed into place.
func (m *DirMailer) Send(_ context.Context, msg *Message) error {
	built, err := build(m.from, msg)
	if err != nil {
		return fmt.Errorf("build message %s: %w", msg.ID, err)
	}
	var buf bytes.Buffer
	if _, err := built.WriteTo(&buf); err != nil {
		return fmt.Errorf("render message %s: %w", msg.ID, err)
	}

	tmp, err := os.CreateTemp(m.dir, ".sending-*.eml")
	if err != nil {
		return fmt.Errorf("create temporary file for message %s: %w", msg.ID, err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("write message %s: %w", msg.ID, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync message %s: %w", msg.ID, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close message %s: %w", msg.ID, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(m.dir, MessageFileName(msg.ID))); err != nil {
		return fmt.Errorf("move message %s into place: %w", msg.ID, err)
	}
	return nil
}

// MessageFileName is the name DirMailer gives the file of the message
// with Message-ID id.
func MessageFileName(id string) string {
	safe := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9',
			r == '.', r == '-', r == '_', r == '@', r == '+':
			return r
		}
		return '_'
	}, id)
	return safe + ".eml"
}
