package ratelimit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestView(t *testing.T) {
	t.Parallel()
	p := Policy{Name: "token", Quota: 10, Window: time.Minute}
	now := time.Now()
	over := func(hits int64) bool { return hits > 10 }

	// From half the quota on, every hit goes to Postgres, where the
	// refusal is decided on the count every instance adds to.
	t.Run("SyncsEveryHitFromHalfTheQuota", func(t *testing.T) {
		t.Parallel()
		v := newView(p, 10)
		require.Equal(t, int64(1), v.hit("s", now), "a subject never synced")
		_ = v.synced("s", window{Hits: 3, RetryAfter: 60}, now, over)
		require.Zero(t, v.hit("s", now), "3 + 1, below half")
		require.Equal(t, int64(2), v.hit("s", now), "3 + 2 is half: both go")
		_ = v.synced("s", window{Hits: 9, RetryAfter: 60}, now, over)
		require.Equal(t, int64(1), v.hit("s", now))
		require.Equal(t, int64(1), v.hit("s", now.Add(time.Millisecond)))
	})

	t.Run("StartsOverWhenTheWindowEnds", func(t *testing.T) {
		t.Parallel()
		v := newView(p, 10)
		v.hit("s", now)
		_ = v.synced("s", window{Hits: 11, RetryAfter: 2}, now, over)
		refused := v.refusal("s", now.Add(500*time.Millisecond), over)
		require.NotNil(t, refused)
		require.Equal(t, 2, refused.RetryAfter, "rounded up")
		require.Nil(t, v.refusal("s", now.Add(2*time.Second), over))
		require.Equal(t, int64(1), v.hit("s", now.Add(2*time.Second)), "a new window is learnt from Postgres")
	})

	// A flood from many addresses must not grow an instance's memory
	// without end.
	t.Run("IsBounded", func(t *testing.T) {
		t.Parallel()
		v := newView(p, 2)
		_ = v.synced("a", window{Hits: 1, RetryAfter: 1}, now, over)
		_ = v.synced("b", window{Hits: 1, RetryAfter: 60}, now, over)
		_ = v.synced("c", window{Hits: 1, RetryAfter: 60}, now, over)
		require.Len(t, v.subjects, 2)
		require.NotContains(t, v.subjects, "c", "full: not kept")
		later := now.Add(2 * time.Second)
		_ = v.synced("c", window{Hits: 1, RetryAfter: 60}, later, over)
		require.Contains(t, v.subjects, "c", "an ended window made room")
		require.NotContains(t, v.subjects, "a")
		require.Equal(t, int64(1), v.hit("d", later), "a subject not kept is synced every time")
		require.Equal(t, int64(1), v.hit("d", later))
		require.NotNil(t, v.synced("d", window{Hits: 11, RetryAfter: 60}, later, over),
			"a subject not kept is refused on Postgres's answer")
	})
}
