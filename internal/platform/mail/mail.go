// Package mail delivers plain-text email: through an SMTP server (SMTP),
// or, where none is configured, as .eml files written into a directory
// (Dir), the mail catcher of development and tests.
//
// It knows nothing of what the messages say; the receipt job (package
// jobs) composes the one kind Rocket Rides sends.
package mail

import (
	"context"
	"fmt"
	"time"

	gomail "github.com/wneessen/go-mail"
)

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
func build(from string, msg *Message) (*gomail.Msg, error) {
	m := gomail.NewMsg()
	if err := m.From(from); err != nil {
		return nil, fmt.Errorf("set From %q: %w", from, err)
	}
	if err := m.To(msg.To); err != nil {
		return nil, fmt.Errorf("set To %q: %w", msg.To, err)
	}
	m.Subject(msg.Subject)
	m.SetDateWithValue(msg.Date)
	m.SetMessageIDWithValue(msg.ID)
	m.SetBodyString(gomail.TypeTextPlain, msg.Body)
	return m, nil
}

// checkFrom refuses a sender that would fail every send, so that a bad
// setting stops the process at startup rather than each job later.
func checkFrom(field, from string) error {
	if from == "" {
		return fmt.Errorf("mail: %s is required", field)
	}
	if err := gomail.NewMsg().From(from); err != nil {
		return fmt.Errorf("mail: %s %q is not an address: %w", field, from, err)
	}
	return nil
}
