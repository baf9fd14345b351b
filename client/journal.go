package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// MaxResumeAge is the oldest a pending ride may be and still be resumed.
// The server refuses a key's request for 30 days after its first use
// (410 idempotency_key_expired, final); past that the key is free again
// and the request would run as a new ride, so a day's margin short of it
// a pending ride is crossed out unsent.
const MaxResumeAge = 29 * 24 * time.Hour

// PendingRide is a ride request as a Journal records it before its first
// try: the key and the bytes every try sends, so that an app killed at
// any point resumes it as it was, never as a second ride.
type PendingRide struct {
	IdempotencyKey string `json:"idempotency_key"`
	// Body is the request's form, byte for byte as the first try sent
	// it; a resumed ride sends it again rather than encoding its
	// parameters anew.
	Body string `json:"body"`
	// Recorded is when the ride was written down, before its first try.
	Recorded time.Time `json:"recorded"`
}

// A Journal is where a Client writes down a ride before its first try and
// crosses it out on a final answer (docs/clients.md, "The journal"). One
// process owns a journal: two sharing one would resume each other's rides.
type Journal interface {
	// Add records r, replacing a ride with the same key. It returns once
	// the record outlives the process: a ride whose Add failed is not
	// sent.
	Add(r PendingRide) error
	// Remove crosses out the ride with key; a key not recorded is no
	// error.
	Remove(key string) error
	// Pending lists the rides recorded and not crossed out, oldest
	// first.
	Pending() ([]PendingRide, error)
}

// MemoryJournal is a Journal in memory, for tests: it outlives no
// process. Its zero value is an empty journal.
type MemoryJournal struct {
	mu    sync.Mutex
	rides []PendingRide
}

// Add records r.
func (j *MemoryJournal) Add(r PendingRide) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.rides = append(without(j.rides, r.IdempotencyKey), r)
	return nil
}

// Remove crosses out the ride with key.
func (j *MemoryJournal) Remove(key string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.rides = without(j.rides, key)
	return nil
}

// Pending lists the rides recorded, oldest first.
func (j *MemoryJournal) Pending() ([]PendingRide, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.rides), nil
}

func without(rides []PendingRide, key string) []PendingRide {
	return slices.DeleteFunc(slices.Clone(rides), func(r PendingRide) bool { return r.IdempotencyKey == key })
}

// FileJournal is a Journal in one JSON file. Every change writes the
// whole journal to a temporary file beside it, fsyncs it, renames it
// over the journal and fsyncs the directory: a crash, of the process or
// of the machine, leaves either the old journal or the new one, whole.
type FileJournal struct {
	path string
	mu   sync.Mutex
}

// fileFormat is the journal file's content.
type fileFormat struct {
	Pending []PendingRide `json:"pending"`
}

// NewFileJournal returns the journal in the file at path, creating
// neither the file nor its directory until the first ride is added. A
// missing file is an empty journal; a file that cannot be read as one
// is refused, naming its path.
func NewFileJournal(path string) (*FileJournal, error) {
	if path == "" {
		return nil, errors.New("client: a file journal needs a path")
	}
	j := &FileJournal{path: path}
	if _, err := j.read(); err != nil {
		return nil, err
	}
	return j, nil
}

// Add records r, durably.
func (j *FileJournal) Add(r PendingRide) error {
	return j.change(func(rides []PendingRide) []PendingRide { return append(without(rides, r.IdempotencyKey), r) })
}

// Remove crosses out the ride with key, durably.
func (j *FileJournal) Remove(key string) error {
	return j.change(func(rides []PendingRide) []PendingRide { return without(rides, key) })
}

// Pending lists the rides recorded, oldest first.
func (j *FileJournal) Pending() ([]PendingRide, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.read()
}

func (j *FileJournal) change(edit func([]PendingRide) []PendingRide) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	rides, err := j.read()
	if err != nil {
		return err
	}
	return j.write(edit(rides))
}

func (j *FileJournal) read() ([]PendingRide, error) {
	raw, err := os.ReadFile(j.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("client: read the journal: %w", err)
	}
	var f fileFormat
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("client: the journal %s is not a journal: %w", j.path, err)
	}
	return f.Pending, nil
}

// write replaces the journal with rides: temporary file, fsync, rename,
// fsync of the directory, which makes the rename itself durable.
func (j *FileJournal) write(rides []PendingRide) (err error) {
	// Unescaped, so that a body reads in the file as it was sent.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(fileFormat{Pending: rides}); err != nil {
		return fmt.Errorf("client: encode the journal: %w", err)
	}
	raw := buf.Bytes()
	dir := filepath.Dir(j.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("client: write the journal: %w", err)
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(j.path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("client: write the journal: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name()) // the journal itself is untouched
		}
	}()
	_, err = tmp.Write(raw)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), j.path)
	}
	if err != nil {
		return fmt.Errorf("client: write the journal: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("client: write the journal: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
