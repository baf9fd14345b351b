package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// failingJournal refuses every change, as a full disk would.
type failingJournal struct{ MemoryJournal }

var errDiskFull = errors.New("no space left on device")

func (*failingJournal) Add(PendingRide) error { return errDiskFull }
func (*failingJournal) Remove(string) error   { return errDiskFull }

func keys(t *testing.T, j Journal) []string {
	t.Helper()
	rides, err := j.Pending()
	if err != nil {
		t.Fatal(err)
	}
	var ks []string
	for _, r := range rides {
		ks = append(ks, r.IdempotencyKey)
	}
	return ks
}

func TestJournal(t *testing.T) {
	t.Parallel()

	// Both journals keep the same rides in the same order; the file's
	// survive its reopening, as they survive the process.
	t.Run("RecordsReplacesAndCrossesOut", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "not-yet", "journal.json")
		file, err := NewFileJournal(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range []Journal{&MemoryJournal{}, file} {
			for _, k := range []string{"key-a", "key-b", "key-c"} {
				if err := j.Add(PendingRide{IdempotencyKey: k, Body: "origin_lat=1&" + k}); err != nil {
					t.Fatal(err)
				}
			}
			if err := j.Add(PendingRide{IdempotencyKey: "key-a", Body: "origin_lat=2"}); err != nil {
				t.Fatal(err)
			}
			if err := j.Remove("key-b"); err != nil {
				t.Fatal(err)
			}
			if err := j.Remove("never-recorded"); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(keys(t, j), ","); got != "key-c,key-a" {
				t.Fatalf("%T: pending %s, want key-c,key-a", j, got)
			}
		}
		reopened, err := NewFileJournal(path)
		if err != nil {
			t.Fatal(err)
		}
		rides, err := reopened.Pending()
		if err != nil {
			t.Fatal(err)
		}
		if len(rides) != 2 || rides[1].Body != "origin_lat=2" {
			t.Fatalf("reopened: %+v", rides)
		}
		// Nothing but the journal is left in its directory.
		entries, err := os.ReadDir(filepath.Dir(path))
		if err != nil || len(entries) != 1 {
			t.Fatalf("directory: %v, %v", entries, err)
		}
	})

	// A crash between the temporary file and the rename leaves the
	// temporary file behind; the journal is the old one, whole.
	t.Run("IgnoresAnInterruptedWrite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "journal.json")
		j, err := NewFileJournal(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Add(PendingRide{IdempotencyKey: "key-a"}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path+".123.tmp", []byte(`{"pending":[{"idem`), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(keys(t, j), ","); got != "key-a" {
			t.Fatalf("pending %s", got)
		}
	})

	t.Run("RefusesAFileThatIsNoJournal", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "journal.json")
		if err := os.WriteFile(path, []byte("not json"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := NewFileJournal(path); err == nil || !strings.Contains(err.Error(), path) {
			t.Fatalf("error %v, want one naming %s", err, path)
		}
		if _, err := NewFileJournal(""); err == nil {
			t.Fatal("an empty path was accepted")
		}
	})
}

// TestCreateRideWithAJournal: a ride is written down before its first
// try, crossed out on a final answer only, and resumed with its key and
// bytes.
func TestCreateRideWithAJournal(t *testing.T) {
	t.Parallel()

	t.Run("RecordsBeforeTheFirstTry", func(t *testing.T) {
		t.Parallel()
		j := &MemoryJournal{}
		seenDuring := make(chan []PendingRide, 1)
		s := &script{answers: []func(http.ResponseWriter){func(w http.ResponseWriter) {
			during, _ := j.Pending()
			seenDuring <- during
			rideAnswer(false)(w)
		}}}
		srv := httptest.NewServer(s)
		defer srv.Close()
		c, _, _ := testClient(t, srv, Config{Journal: j})
		if _, err := c.CreateRide(context.Background(), params); err != nil {
			t.Fatal(err)
		}
		during := <-seenDuring
		if len(during) != 1 || during[0].IdempotencyKey != s.tries[0].key || during[0].Body != s.tries[0].body ||
			time.Since(during[0].Recorded) > time.Minute {
			t.Fatalf("during the try the journal held %+v; the try sent %+v", during, s.tries[0])
		}
		if got := keys(t, j); len(got) != 0 {
			t.Fatalf("after a 201 the journal holds %v", got)
		}
	})

	t.Run("CrossesOutOnAFinalAnswerOnly", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			name    string
			answer  func(http.ResponseWriter)
			pending bool
		}{
			{"Declined", problemAnswer(402, "card_declined"), false},
			{"KeyReused", problemAnswer(422, "idempotency_key_reused"), false},
			{"GaveUpOnA503", problemAnswer(503, "payment_unavailable", "Retry-After", "1"), true},
			{"GaveUpWithoutAnAnswer", func(http.ResponseWriter) { panic(http.ErrAbortHandler) }, true},
		} {
			j := &MemoryJournal{}
			srv := httptest.NewServer(&script{answers: []func(http.ResponseWriter){tt.answer}})
			c, _, _ := testClient(t, srv, Config{Journal: j, MaxAttempts: 2})
			_, err := c.CreateRide(context.Background(), RideParams{IdempotencyKey: "key-chosen-by-the-caller-1"})
			srv.Close()
			if err == nil {
				t.Fatalf("%s: no error", tt.name)
			}
			if got := keys(t, j); (len(got) == 1) != tt.pending {
				t.Fatalf("%s: pending %v, want pending=%v", tt.name, got, tt.pending)
			}
		}
	})

	t.Run("ResumesWithTheKeyAndBytes", func(t *testing.T) {
		t.Parallel()
		j := &MemoryJournal{}
		// Bytes no encoder of the parameters would make: a resumed ride
		// sends what was recorded, not its parameters encoded anew.
		r := PendingRide{IdempotencyKey: "key-of-a-killed-app-1", Body: "target_lon=4&origin_lat=1&origin_lon=2&target_lat=3", Recorded: time.Now().Add(-time.Hour)}
		if err := j.Add(r); err != nil {
			t.Fatal(err)
		}
		s := &script{answers: []func(http.ResponseWriter){rideAnswer(true)}}
		srv := httptest.NewServer(s)
		defer srv.Close()
		c, _, _ := testClient(t, srv, Config{Journal: j})
		pending, err := c.PendingRides()
		if err != nil || len(pending) != 1 {
			t.Fatalf("pending %v, %v", pending, err)
		}
		ride, err := c.ResumeRide(context.Background(), pending[0])
		if err != nil || !ride.Replayed {
			t.Fatalf("ride %+v, %v", ride, err)
		}
		if len(s.tries) != 1 || s.tries[0] != (seen{key: r.IdempotencyKey, body: r.Body}) {
			t.Fatalf("tries %+v, want the recorded key and body", s.tries)
		}
		if got := keys(t, j); len(got) != 0 {
			t.Fatalf("pending after the 201: %v", got)
		}
	})

	t.Run("DropsARideTooOldToResume", func(t *testing.T) {
		t.Parallel()
		j := &MemoryJournal{}
		r := PendingRide{IdempotencyKey: "key-of-last-month-1", Body: "origin_lat=1", Recorded: time.Now().Add(-MaxResumeAge - time.Hour)}
		if err := j.Add(r); err != nil {
			t.Fatal(err)
		}
		s := &script{answers: []func(http.ResponseWriter){rideAnswer(false)}}
		srv := httptest.NewServer(s)
		defer srv.Close()
		c, _, _ := testClient(t, srv, Config{Journal: j})
		if _, err := c.ResumeRide(context.Background(), r); !errors.Is(err, ErrTooOldToResume) {
			t.Fatalf("error %v", err)
		}
		if len(s.tries) != 0 || len(keys(t, j)) != 0 {
			t.Fatalf("%d tries, pending %v", len(s.tries), keys(t, j))
		}
	})

	t.Run("SendsNothingTheJournalCannotRecord", func(t *testing.T) {
		t.Parallel()
		s := &script{answers: []func(http.ResponseWriter){rideAnswer(false)}}
		srv := httptest.NewServer(s)
		defer srv.Close()
		c, _, _ := testClient(t, srv, Config{Journal: &failingJournal{}})
		if _, err := c.CreateRide(context.Background(), params); !errors.Is(err, errDiskFull) {
			t.Fatalf("error %v", err)
		}
		if len(s.tries) != 0 {
			t.Fatalf("%d tries of a ride the journal refused", len(s.tries))
		}
	})

	t.Run("KeepsTheAnswerWhenTheJournalCannotCrossItOut", func(t *testing.T) {
		t.Parallel()
		s := &script{answers: []func(http.ResponseWriter){rideAnswer(false)}}
		srv := httptest.NewServer(s)
		defer srv.Close()
		c, _, _ := testClient(t, srv, Config{Journal: &failingJournal{}})
		ride, err := c.ResumeRide(context.Background(), PendingRide{IdempotencyKey: "key-of-a-killed-app-2", Body: "origin_lat=1", Recorded: time.Now()})
		if ride == nil || ride.ID != 42 || !errors.Is(err, errDiskFull) {
			t.Fatalf("ride %+v, error %v", ride, err)
		}
	})
}
