package mail

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// DirConfig configures a directory mailer.
type DirConfig struct {
	// Dir is the directory messages are written into, created if
	// missing. Required.
	Dir string

	// From is the sender of every message. Required.
	From string
}

func (c *DirConfig) validate() error {
	if c.Dir == "" {
		return errors.New("mail: DirConfig.Dir is required")
	}
	return checkFrom("DirConfig.From", c.From)
}

// Dir "sends" a message by writing it as an .eml file into a directory:
// the mail catcher for development and tests, when no SMTP server is
// configured.
type Dir struct {
	from string
	dir  string
}

// NewDir returns a mailer writing into config.Dir, which it creates.
func NewDir(config *DirConfig) (*Dir, error) {
	if config == nil {
		return nil, errors.New("mail: DirConfig is required (DirConfig.Dir and DirConfig.From)")
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(config.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("mail: create DirConfig.Dir: %w", err)
	}
	return &Dir{from: config.From, dir: config.Dir}, nil
}

// Send writes msg to <dir>/<Message-ID>.eml. The file is named after the
// Message-ID so that sending the same message again replaces it rather
// than adding a copy, and it appears whole or not at all: written to a
// temporary file, synced, then renamed into place.
func (m *Dir) Send(_ context.Context, msg *Message) error {
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
	if err := os.Rename(tmp.Name(), filepath.Join(m.dir, FileName(msg.ID))); err != nil {
		return fmt.Errorf("move message %s into place: %w", msg.ID, err)
	}
	return nil
}

// FileName is the name Dir gives the file of the message with Message-ID
// id.
func FileName(id string) string {
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
