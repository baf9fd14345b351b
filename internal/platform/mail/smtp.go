package mail

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	gomail "github.com/wneessen/go-mail"
)

// DefaultTimeout bounds connecting to the SMTP server and each command
// sent to it, unless SMTPConfig.Timeout says otherwise.
const DefaultTimeout = 30 * time.Second

// SMTPConfig configures an SMTP mailer.
type SMTPConfig struct {
	// URL is the server, required:
	//
	//	smtp://[user:pass@]host[:port]    STARTTLS when the server offers it (port 25 by default)
	//	smtps://[user:pass@]host[:port]   TLS from the first byte (port 465 by default)
	//
	// Plain smtp:// suits local mail catchers such as maildev, which
	// offer no TLS at all.
	URL string

	// From is the sender of every message, such as
	// "Rocket Rides <receipts@rocketrides.local>". Required.
	From string

	// Timeout bounds connecting and each SMTP command. Defaults to
	// DefaultTimeout.
	Timeout time.Duration
}

func (c *SMTPConfig) validate() error {
	if c.URL == "" {
		return errors.New("mail: SMTPConfig.URL is required")
	}
	if c.Timeout < 0 {
		return fmt.Errorf("mail: SMTPConfig.Timeout must not be negative, got %s", c.Timeout)
	}
	return checkFrom("SMTPConfig.From", c.From)
}

// SMTP sends messages through an SMTP server.
type SMTP struct {
	from   string
	client *gomail.Client
}

// NewSMTP returns a mailer for the server at config.URL.
func NewSMTP(config *SMTPConfig) (*SMTP, error) {
	if config == nil {
		return nil, errors.New("mail: SMTPConfig is required (SMTPConfig.URL and SMTPConfig.From)")
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	u, err := url.Parse(config.URL)
	if err != nil {
		return nil, fmt.Errorf("mail: SMTPConfig.URL: %w", err)
	}
	var opts []gomail.Option
	switch u.Scheme {
	case "smtp":
		opts = append(opts, gomail.WithTLSPortPolicy(gomail.TLSOpportunistic))
	case "smtps":
		opts = append(opts, gomail.WithSSLPort(false))
	default:
		return nil, fmt.Errorf("mail: SMTPConfig.URL scheme must be smtp or smtps, got %q", u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("mail: SMTPConfig.URL has no host")
	}
	if p := u.Port(); p != "" {
		port, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("mail: SMTPConfig.URL port %q: %w", p, err)
		}
		opts = append(opts, gomail.WithPort(port))
	}
	if u.User != nil {
		password, _ := u.User.Password()
		// The first mechanism the server offers, strongest first. PLAIN
		// and LOGIN send the password as is, so go-mail allows them only
		// over TLS or to localhost (a local mail catcher).
		opts = append(opts,
			gomail.WithOpportunisticSMTPAuth(
				gomail.SMTPAuthSCRAMSHA256, gomail.SMTPAuthSCRAMSHA1, gomail.SMTPAuthCramMD5,
				gomail.SMTPAuthPlain, gomail.SMTPAuthLogin,
			),
			gomail.WithUsername(u.User.Username()),
			gomail.WithPassword(password),
		)
	}
	opts = append(opts, gomail.WithTimeout(cmp.Or(config.Timeout, DefaultTimeout)))
	client, err := gomail.NewClient(u.Hostname(), opts...)
	if err != nil {
		return nil, fmt.Errorf("mail: create SMTP client for %s: %w", u.Host, err)
	}
	return &SMTP{from: config.From, client: client}, nil
}

// Send delivers msg over one SMTP connection, opened and closed for it.
func (m *SMTP) Send(ctx context.Context, msg *Message) error {
	built, err := build(m.from, msg)
	if err != nil {
		return fmt.Errorf("build message %s: %w", msg.ID, err)
	}
	if err := m.client.DialAndSendWithContext(ctx, built); err != nil {
		return fmt.Errorf("send message %s via SMTP: %w", msg.ID, err)
	}
	return nil
}
