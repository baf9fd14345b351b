package ratelimit

import (
	"sync"
	"time"
)

// SyncEvery is how long an instance counts a subject's requests on its
// own, below half the quota, before it adds them to the shared count; and
// how old its copy of an address's failures may be.
const SyncEvery = 100 * time.Millisecond

// maxSubjects bounds the subjects an instance keeps a view of: a flood
// from many addresses or tokens must not grow its memory without end.
// Past it, a new subject is counted in Postgres on every request and
// nothing about it is kept.
const maxSubjects = 10_000

// view is an instance's view of one policy's shared counts: for each
// subject it has seen, the count as Postgres last answered it, the hits
// counted here since, and when the window ends.
//
// Within a window a count only grows, so a subject found over its quota
// stays refused until the window ends, and the view refuses it without
// asking Postgres again. Below half the quota the view counts on its own
// and adds its hits to the shared count at most every SyncEvery; from
// half the quota on, every hit is added, and decided, in Postgres.
type view struct {
	policy   Policy
	mu       sync.Mutex
	max      int
	subjects map[string]*tally
}

// tally is a subject in a view.
type tally struct {
	shared   int64     // the window's hits in Postgres, when last synced
	pending  int64     // hits counted here since, not in Postgres yet
	endsAt   time.Time // the window's end by this instance's clock; zero: not known
	syncedAt time.Time // when last synced or read; zero: never
}

func newView(p Policy, max int) *view {
	return &view{policy: p, max: max, subjects: map[string]*tally{}}
}

// tally returns subject's tally, a fresh one that is not kept when the
// view is full, with a window that has ended started over. The caller
// holds v.mu.
func (v *view) tally(subject string, now time.Time) *tally {
	t, ok := v.subjects[subject]
	if !ok {
		t = &tally{}
		if len(v.subjects) >= v.max {
			for s, old := range v.subjects {
				if old.pending == 0 && !now.Before(old.endsAt) {
					delete(v.subjects, s)
				}
			}
		}
		if len(v.subjects) < v.max {
			v.subjects[subject] = t
		}
	}
	if !t.endsAt.IsZero() && !now.Before(t.endsAt) {
		t.shared, t.endsAt = 0, time.Time{}
	}
	return t
}

// refusal is subject's refusal when its count is over limit in a window
// that runs, or nil.
func (v *view) refusal(subject string, now time.Time, over func(shared int64) bool) *Exceeded {
	v.mu.Lock()
	defer v.mu.Unlock()
	t, ok := v.subjects[subject]
	if !ok {
		return nil
	}
	return v.refusalOf(t, now, over)
}

// refusalOf is t's refusal, as refusal; the caller holds v.mu.
func (v *view) refusalOf(t *tally, now time.Time, over func(shared int64) bool) *Exceeded {
	if t.endsAt.IsZero() || !now.Before(t.endsAt) || !over(t.shared) {
		return nil
	}
	// Rounded up: the client waits until the window has ended.
	return &Exceeded{Policy: v.policy, RetryAfter: int((t.endsAt.Sub(now) + time.Second - 1) / time.Second)}
}

// hit counts one hit of subject. It returns how many hits to add to the
// shared count now, with this request, or 0 when the view counts this one
// on its own: below half the quota, within SyncEvery of the last sync,
// in a window it knows.
func (v *view) hit(subject string, now time.Time) (send int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	t := v.tally(subject, now)
	t.pending++
	half := (int64(v.policy.Quota) + 1) / 2
	if !t.syncedAt.IsZero() && now.Sub(t.syncedAt) < SyncEvery && !t.endsAt.IsZero() && t.shared+t.pending < half {
		return 0
	}
	send, t.pending, t.syncedAt = t.pending, 0, now
	return send
}

// stale reports whether subject's copy is to be read again (never read,
// or read SyncEvery ago), and if so takes the read on: requests meanwhile
// use the copy there is.
func (v *view) stale(subject string, now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	t := v.tally(subject, now)
	if !t.syncedAt.IsZero() && now.Sub(t.syncedAt) < SyncEvery {
		return false
	}
	t.syncedAt = now
	return true
}

// synced records what Postgres answered for subject: hits in a window
// that ends retryAfter seconds from now, or none running (hits 0). It
// returns the refusal that answer makes, judged on the answer itself, so
// that a subject the view is too full to keep is refused all the same.
func (v *view) synced(subject string, w window, now time.Time, over func(shared int64) bool) *Exceeded {
	v.mu.Lock()
	defer v.mu.Unlock()
	t := v.tally(subject, now)
	t.shared, t.syncedAt = w.Hits, now
	t.endsAt = time.Time{}
	if w.Hits > 0 {
		t.endsAt = now.Add(time.Duration(w.RetryAfter) * time.Second)
	}
	return v.refusalOf(t, now, over)
}

// unsent gives back n hits that were to be added but were not (the round
// trip failed), for the next sync to add.
func (v *view) unsent(subject string, n int64, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.tally(subject, now).pending += n
}
