package mail_test

import (
	"bufio"
	"encoding/base64"
	"net"
	netmail "net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rocketrides/rocketrides/internal/platform/mail"
)

func TestSMTPMailer(t *testing.T) {
	t.Parallel()

	send := func(t *testing.T, smtpURL string) *mail.Message {
		t.Helper()
		mailer, err := mail.NewSMTP(&mail.SMTPConfig{URL: smtpURL, From: testFrom})
		if err != nil {
			t.Fatal(err)
		}
		msg := &mail.Message{
			ID:      "ride-9.receipt@rocketrides.local",
			To:      "rider@example.com",
			Subject: "Your Rocket Rides receipt",
			Date:    time.Now(),
			Body:    "Amount:  $20.00 USD\n",
		}
		if err := mailer.Send(t.Context(), msg); err != nil {
			t.Fatalf("Send: %v", err)
		}
		return msg
	}

	t.Run("DeliversWithoutTLS", func(t *testing.T) {
		t.Parallel()
		srv := startSMTPServer(t)

		msg := send(t, "smtp://"+srv.addr)

		got := srv.received(t)
		if got.from != "receipts@rocketrides.local" || len(got.rcpt) != 1 || got.rcpt[0] != msg.To {
			t.Errorf("envelope from=%q rcpt=%q, want receipts@rocketrides.local -> %s", got.from, got.rcpt, msg.To)
		}
		parsed, err := netmail.ReadMessage(strings.NewReader(got.data))
		if err != nil {
			t.Fatalf("parse delivered message: %v", err)
		}
		if id := parsed.Header.Get("Message-ID"); id != "<"+msg.ID+">" {
			t.Errorf("Message-ID = %q, want <%s>", id, msg.ID)
		}
		if got.auth != "" {
			t.Errorf("authenticated as %q without credentials in the URL", got.auth)
		}
	})

	t.Run("AuthenticatesWithURLCredentials", func(t *testing.T) {
		t.Parallel()
		srv := startSMTPServer(t)

		send(t, "smtp://rider:s3cret@"+srv.addr)

		if got := srv.received(t); got.auth != "\x00rider\x00s3cret" {
			t.Errorf("AUTH PLAIN credentials = %q, want rider/s3cret", got.auth)
		}
	})

	t.Run("RejectsOtherSchemes", func(t *testing.T) {
		t.Parallel()
		if _, err := mail.NewSMTP(&mail.SMTPConfig{URL: "http://localhost:25", From: testFrom}); err == nil {
			t.Fatal("NewSMTP accepted an http URL")
		}
	})

	t.Run("RejectsMissingSettings", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			config *mail.SMTPConfig
			field  string
		}{
			{nil, "SMTPConfig.URL"},
			{&mail.SMTPConfig{From: testFrom}, "SMTPConfig.URL"},
			{&mail.SMTPConfig{URL: "smtp://localhost"}, "SMTPConfig.From"},
			{&mail.SMTPConfig{URL: "smtp://localhost", From: "not an address"}, "SMTPConfig.From"},
			{&mail.SMTPConfig{URL: "smtp://localhost", From: testFrom, Timeout: -time.Second}, "SMTPConfig.Timeout"},
		} {
			_, err := mail.NewSMTP(tc.config)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("NewSMTP(%+v) = %v, want an error naming %s", tc.config, err, tc.field)
			}
		}
	})
}

// testFrom is the sender of the messages these tests send.
const testFrom = "Rocket Rides <receipts@rocketrides.local>"

// smtpServer is just enough of an SMTP server on loopback to accept one
// message: no TLS, AUTH PLAIN accepted with any credentials.
type smtpServer struct {
	addr string
	done chan delivery
}

type delivery struct {
	from, auth, data string
	rcpt             []string
}

func startSMTPServer(t *testing.T) *smtpServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &smtpServer{addr: ln.Addr().String(), done: make(chan delivery, 1)}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Errorf("set the SMTP session's deadline: %v", err)
			return
		}
		srv.serve(conn)
	})
	return srv
}

func (s *smtpServer) serve(conn net.Conn) {
	r := bufio.NewReader(conn)
	reply := func(lines ...string) {
		// A client that hung up shows as the next read failing, which
		// ends the session.
		_, _ = conn.Write([]byte(strings.Join(lines, "\r\n") + "\r\n"))
	}
	var d delivery
	reply("220 localhost ESMTP test")
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		verb, arg, _ := strings.Cut(line, " ")
		switch strings.ToUpper(verb) {
		case "EHLO":
			reply("250-localhost", "250-AUTH PLAIN", "250 8BITMIME")
		case "AUTH":
			mech, initial, _ := strings.Cut(arg, " ")
			if mech != "PLAIN" {
				reply("504 unsupported")
				continue
			}
			if initial == "" {
				reply("334 ")
				initial, _ = r.ReadString('\n')
			}
			creds, _ := base64.StdEncoding.DecodeString(strings.TrimSpace(initial))
			d.auth = string(creds)
			reply("235 ok")
		case "MAIL":
			d.from = bracketed(arg)
			reply("250 ok")
		case "RCPT":
			d.rcpt = append(d.rcpt, bracketed(arg))
			reply("250 ok")
		case "DATA":
			reply("354 go ahead")
			var data strings.Builder
			for {
				l, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if l == ".\r\n" {
					break
				}
				data.WriteString(strings.TrimPrefix(l, "."))
			}
			d.data = data.String()
			reply("250 queued")
		case "QUIT":
			reply("221 bye")
			s.done <- d
			return
		default: // NOOP, RSET
			reply("250 ok")
		}
	}
}

// bracketed returns the address in "FROM:<addr> BODY=8BITMIME".
func bracketed(arg string) string {
	_, rest, _ := strings.Cut(arg, "<")
	addr, _, _ := strings.Cut(rest, ">")
	return addr
}

func (s *smtpServer) received(t *testing.T) delivery {
	t.Helper()
	select {
	case d := <-s.done:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("the SMTP server received no complete session")
		return delivery{}
	}
}
