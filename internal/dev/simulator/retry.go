package simulator

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rocketrides/rocketrides/internal/platform/loop"
)

// Policy is the simulator's retry policy: capped exponential backoff with
// full jitter, and Retry-After as a floor. Full jitter (a wait drawn from
// [0, ceiling]) keeps many clients that failed together, say when the API
// restarted, from all retrying at the same instant and failing together
// again.
type Policy struct {
	// MaxAttempts counts the first attempt too; zero means 5.
	MaxAttempts int
	// BaseDelay is the backoff ceiling after the first attempt, doubled
	// after each further one; zero means 500ms.
	BaseDelay time.Duration
	// MaxDelay caps every wait, Retry-After included, so that a confused
	// server cannot park the simulator; zero means 10s.
	MaxDelay time.Duration
	// Jitter draws a wait from [0, ceiling]; nil draws uniformly. Tests
	// fix it to make waits predictable.
	Jitter func(ceiling time.Duration) time.Duration
	// Sleep waits d or until ctx ends; nil uses a timer. Tests record the
	// waits instead of sleeping through them.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Policy defaults.
const (
	DefaultMaxAttempts = 5
	DefaultBaseDelay   = 500 * time.Millisecond
	DefaultMaxDelay    = 10 * time.Second
)

func (p Policy) withDefaults() Policy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = DefaultBaseDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = DefaultMaxDelay
	}
	if p.Jitter == nil {
		p.Jitter = func(ceiling time.Duration) time.Duration {
			return time.Duration(rand.Int64N(int64(ceiling) + 1))
		}
	}
	if p.Sleep == nil {
		p.Sleep = loop.Sleep
	}
	return p
}

// Delay is the wait before the attempt after attempt number n (1-based),
// given the server's Retry-After (zero when it sent none).
func (p Policy) Delay(n int, retryAfter time.Duration) time.Duration {
	p = p.withDefaults()
	ceiling := p.MaxDelay
	// BaseDelay << (n-1), without overflowing for a large n.
	if n < 32 {
		if c := p.BaseDelay << (n - 1); c > 0 && c < ceiling {
			ceiling = c
		}
	}
	d := p.Jitter(ceiling)
	// The server knows better than our backoff when it will be ready.
	d = max(d, retryAfter)
	return min(d, p.MaxDelay)
}

// retry makes attempts until one is final, the policy's attempts are used
// up or ctx ends, reporting every attempt's outcome (with its Result set)
// as it goes, and returns the last one. attempt must send the identical
// request each time: the same idempotency key and the same parameters,
// which is what makes retrying safe.
func retry(ctx context.Context, p Policy, attempt func(ctx context.Context, n int) Outcome, report func(Outcome)) Outcome {
	p = p.withDefaults()
	for n := 1; ; n++ {
		o := attempt(ctx, n)
		o.Attempt = n
		switch {
		case !o.retryable():
			o.Result = o.final()
		case n >= p.MaxAttempts || ctx.Err() != nil:
			o.Result = GaveUp
		default:
			o.Result = Retrying
			o.Wait = p.Delay(n, o.RetryAfter)
		}
		report(o)
		if o.Result != Retrying {
			return o
		}
		if err := p.Sleep(ctx, o.Wait); err != nil {
			// Stopping: the key is left as it is, for the completer.
			o.Result, o.Wait = GaveUp, 0
			return o
		}
	}
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an
// HTTP-date (RFC 9110 section 10.2.3). Anything else is no hint.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		return max(time.Duration(secs)*time.Second, 0)
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}
