package mail_test

import (
	"io"
	"mime/quotedprintable"
	netmail "net/mail"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rocketrides/rocketrides/internal/platform/mail"
)

func TestDir(t *testing.T) {
	t.Parallel()

	t.Run("SameMessageIDReplacesTheFile", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "nested", "mail")
		mailer, err := mail.NewDir(&mail.DirConfig{Dir: dir, From: testFrom})
		if err != nil {
			t.Fatal(err)
		}
		msg := &mail.Message{
			ID:      "ride-42.receipt@rocketrides.local",
			To:      "rider@example.com",
			Subject: "Your Rocket Rides receipt",
			Date:    time.Now(),
			Body:    "first",
		}
		if err := mailer.Send(t.Context(), msg); err != nil {
			t.Fatal(err)
		}
		msg.Body = "second"
		if err := mailer.Send(t.Context(), msg); err != nil {
			t.Fatal(err)
		}

		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 {
			t.Fatalf("mail directory holds %d files, want 1 (no temporary files left either)", len(entries))
		}
		if entries[0].Name() != mail.FileName(msg.ID) {
			t.Errorf("file = %s, want %s", entries[0].Name(), mail.FileName(msg.ID))
		}
		if _, body := readMessage(t, filepath.Join(dir, entries[0].Name())); !strings.Contains(body, "second") {
			t.Errorf("body = %q, want the later send", body)
		}
	})

	t.Run("RejectsBadSender", func(t *testing.T) {
		t.Parallel()
		if _, err := mail.NewDir(&mail.DirConfig{Dir: t.TempDir(), From: "not an address"}); err == nil {
			t.Fatal("NewDir accepted a malformed sender")
		}
	})

	t.Run("RejectsMissingSettings", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			config *mail.DirConfig
			field  string
		}{
			{nil, "DirConfig.Dir"},
			{&mail.DirConfig{From: testFrom}, "DirConfig.Dir"},
			{&mail.DirConfig{Dir: t.TempDir()}, "DirConfig.From"},
		} {
			_, err := mail.NewDir(tc.config)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("NewDir(%+v) = %v, want an error naming %s", tc.config, err, tc.field)
			}
		}
	})

	t.Run("FileNameKeepsOnlySafeCharacters", func(t *testing.T) {
		t.Parallel()
		if got, want := mail.FileName("a/b\\c d@x.y"), "a_b_c_d@x.y.eml"; got != want {
			t.Errorf("FileName = %q, want %q", got, want)
		}
	})
}

// readMessage parses an .eml file and returns it with its decoded body.
func readMessage(t *testing.T, path string) (*netmail.Message, string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	msg, err := netmail.ReadMessage(f)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	r := msg.Body
	if strings.EqualFold(msg.Header.Get("Content-Transfer-Encoding"), "quoted-printable") {
		r = quotedprintable.NewReader(r)
	}
	body, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read body of %s: %v", path, err)
	}
	return msg, string(body)
}
