package fakestripe

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// A journal keeps a Server's account across restarts (Config.StatePath):
// one JSON line per customer created, per charge created or updated, and
// per idempotent result stored, appended under the server's mutex before
// the request that made it is answered. Opening it replays every line,
// later lines replacing earlier ones for the same object, and rewrites the
// file with what is current (expired keys left out), so it grows only with
// what one run adds.
//
// A line is written with one write(2) and not synced: a killed fake loses
// nothing the kernel has, which is what a restart of make dev needs; a
// machine that loses power may lose the last lines. A torn last line is
// ignored when the journal is read.
type journal struct {
	file *os.File
}

// journalEntry is one line of the journal: exactly one field is set.
type journalEntry struct {
	Customer *journalCustomer `json:"customer,omitempty"`
	Charge   *journalCharge   `json:"charge,omitempty"`
	Key      *journalKey      `json:"key,omitempty"`
}

// journalCustomer is a Customer with its card, which the API renders only
// as default_source, and whether that card declines.
type journalCustomer struct {
	Customer
	Card *journalCard `json:"card,omitempty"`
}

// journalCharge is a Charge with whether its card declines.
type journalCharge struct {
	Charge
	Source *journalCard `json:"source"`
}

type journalCard struct {
	Card
	Declines bool `json:"declines"`
}

func (c *Card) journal() *journalCard {
	if c == nil {
		return nil
	}
	return &journalCard{Card: *c, Declines: c.declines}
}

func (jc *journalCard) card() *Card {
	if jc == nil {
		return nil
	}
	c := jc.Card
	c.declines = jc.Declines
	return &c
}

// journalKey is a finished idempotencyRecord. A key still executing is
// not journaled: its request is answered only after settleKey, so a fake
// stopped meanwhile never answered it either.
type journalKey struct {
	APIKey    string     `json:"api_key"`
	Key       string     `json:"key"`
	Method    string     `json:"method"`
	Path      string     `json:"path"`
	Params    url.Values `json:"params"`
	FirstUsed time.Time  `json:"first_used"`
	Status    int        `json:"status"`
	Body      []byte     `json:"body"`
	RequestID string     `json:"request_id"`
}

func customerEntry(c *Customer) journalEntry {
	return journalEntry{Customer: &journalCustomer{Customer: *c, Card: c.Card.journal()}}
}

func chargeEntry(c *Charge) journalEntry {
	return journalEntry{Charge: &journalCharge{Charge: *c, Source: c.Source.journal()}}
}

func keyEntry(scope idempotencyScope, r *idempotencyRecord) journalEntry {
	return journalEntry{Key: &journalKey{
		APIKey: scope.apiKey, Key: scope.key,
		Method: r.method, Path: r.path, Params: r.params, FirstUsed: r.firstUsed,
		Status: r.result.status, Body: r.result.body, RequestID: r.result.requestID,
	}}
}

// openJournal loads the journal at path into s, which must be new, and
// rewrites it compacted. A missing file is an empty account.
func openJournal(path string, s *Server) (*journal, error) {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("fakestripe: read state: %w", err)
	}
	if err := s.replay(path, data); err != nil {
		return nil, err
	}

	// Compact: the current state to a temporary file, then renamed over
	// the journal, so that a crash meanwhile leaves the old one whole.
	var compact bytes.Buffer
	now := s.nowLocked()
	for _, c := range s.customers {
		compact.Write(entryLine(customerEntry(c)))
	}
	for _, c := range s.charges {
		compact.Write(entryLine(chargeEntry(c)))
	}
	for scope, r := range s.idempotency {
		if !s.expired(r, now) {
			compact.Write(entryLine(keyEntry(scope, r)))
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("fakestripe: state directory: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, compact.Bytes(), 0o600); err != nil {
		return nil, fmt.Errorf("fakestripe: write state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("fakestripe: write state: %w", err)
	}
	file, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("fakestripe: open state: %w", err)
	}
	return &journal{file: file}, nil
}

// replay applies the journal's lines to s.
func (s *Server) replay(path string, data []byte) error {
	lines := bytes.Split(data, []byte("\n"))
	for i, line := range lines {
		if len(line) == 0 {
			continue
		}
		var e journalEntry
		if err := json.Unmarshal(line, &e); err != nil {
			if i == len(lines)-1 {
				// The last line, torn by a kill mid-write (it has no
				// newline): its request was never answered.
				return nil
			}
			return fmt.Errorf("fakestripe: state %s line %d: %w (delete the file to start empty)", path, i+1, err)
		}
		s.apply(e)
	}
	return nil
}

func (s *Server) apply(e journalEntry) {
	switch {
	case e.Customer != nil:
		c := e.Customer.Customer
		c.Card = e.Customer.Card.card()
		if s.customersBy[c.ID] == nil {
			s.customers = append(s.customers, &c)
		}
		s.customersBy[c.ID] = &c
	case e.Charge != nil:
		c := &e.Charge.Charge
		c.Source = e.Charge.Source.card()
		if old := s.chargesByID[c.ID]; old != nil {
			for i := range s.charges {
				if s.charges[i] == old {
					s.charges[i] = c
				}
			}
		} else {
			s.charges = append(s.charges, c)
		}
		s.chargesByID[c.ID] = c
	case e.Key != nil:
		k := e.Key
		s.idempotency[idempotencyScope{apiKey: k.APIKey, key: k.Key}] = &idempotencyRecord{
			method: k.Method, path: k.Path, params: k.Params, firstUsed: k.FirstUsed,
			finished: true,
			result:   storedResult{status: k.Status, body: k.Body, requestID: k.RequestID},
		}
	}
}

// entryLine is e as a journal line. Its fields are plain strings, numbers
// and maps of them, so encoding cannot fail.
func entryLine(e journalEntry) []byte {
	return append(mustMarshal(e), '\n')
}

// recordLocked appends e to the journal, if there is one. s.mu must be
// held, so that lines are in the order the changes were made. A failed
// write is logged: the request has taken effect, and only a restart would
// forget it.
func (s *Server) recordLocked(e journalEntry) {
	if s.journal == nil {
		return
	}
	if _, err := s.journal.file.Write(entryLine(e)); err != nil {
		s.logger.Error("Could not record state; a restart will forget this change", slog.Any("error", err))
	}
}

// Close closes the state file, if any. The Server must not serve requests
// afterwards.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.journal == nil {
		return nil
	}
	err := s.journal.file.Close()
	s.journal = nil
	return err
}
