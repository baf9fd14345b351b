// Second reading: the Completer, its Config and their defaults
// (completer.go works the keys).

package completer

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/platform/loop"
	"github.com/rocketrides/rocketrides/internal/rides"
)

// Completer defaults.
const (
	// DefaultMinAge leaves a request to its client for a while: a client
	// retrying with backoff should get its own answer, not find that the
	// completer finished the request behind its back.
	DefaultMinAge = 5 * time.Minute

	// DefaultRetryInterval is how long a key must have been left alone
	// (by its client or an earlier completer pass) before the completer
	// tries it again, so a key that keeps failing is retried at this
	// pace, not on every poll.
	DefaultRetryInterval = time.Minute

	DefaultPollInterval = 10 * time.Second
	DefaultBatchSize    = 100

	// DefaultSettleWithin is what the API promises a client that stops
	// retrying after a 5xx (docs/openapi.yaml, "After a 5xx"): with the
	// defaults, the completer takes up its request, and settles its
	// ride, within this long of the last attempt, as long as the payment
	// provider answers. A key becomes due DefaultMinAge after it was
	// created and DefaultRetryInterval after it was last worked, both at
	// most the last attempt, and is claimed by the next poll: the sum
	// leaves the poll interval and the work itself a margin.
	DefaultSettleWithin = DefaultMinAge + DefaultRetryInterval

	// DefaultConcurrency is how many keys of a batch are worked at once.
	// A key spends most of its time waiting on Stripe, holding no
	// database connection, so one at a time would finish about four keys
	// a second against a Stripe that takes 250 ms.
	DefaultConcurrency = 16
)

const (
	// claimTimeout bounds the claim of a batch. The claim runs detached
	// from the caller's context: a claim cancelled after it committed
	// would leave its keys locked, unworked, until the lock timeout.
	claimTimeout = 30 * time.Second

	// keyTimeout bounds the work on one key, including the key finished
	// after a shutdown was asked for. It leaves room for the Stripe call
	// with stripe-go's own retries and the phases around it.
	keyTimeout = 2 * time.Minute
)

// Config configures a Completer. Keys and Service are required; every
// other field has a default.
type Config struct {
	// Keys is the store abandoned keys are claimed from. Required.
	Keys *idem.Store

	// Service resumes each claimed key: the same rides.Service the API
	// runs, on the same settings. Required.
	Service *rides.Service

	// MinAge: only keys created longer ago are completed. Defaults to
	// DefaultMinAge.
	MinAge time.Duration

	// RetryInterval: only keys last worked longer ago are completed.
	// Defaults to DefaultRetryInterval.
	RetryInterval time.Duration

	// PollInterval is how long an idle completer waits before looking
	// again. Defaults to DefaultPollInterval.
	PollInterval time.Duration

	// BatchSize is the most keys claimed at once. Defaults to
	// DefaultBatchSize.
	BatchSize int

	// Concurrency is how many keys of a batch are worked at once.
	// Defaults to DefaultConcurrency.
	Concurrency int

	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c *Config) validate() error {
	switch {
	case c.Keys == nil:
		return errors.New("completer: Config.Keys is required")
	case c.Service == nil:
		return errors.New("completer: Config.Service is required")
	case c.MinAge < 0:
		return fmt.Errorf("completer: Config.MinAge must not be negative, got %s", c.MinAge)
	case c.RetryInterval < 0:
		return fmt.Errorf("completer: Config.RetryInterval must not be negative, got %s", c.RetryInterval)
	case c.PollInterval < 0:
		return fmt.Errorf("completer: Config.PollInterval must not be negative, got %s", c.PollInterval)
	case c.BatchSize < 0:
		return fmt.Errorf("completer: Config.BatchSize must not be negative, got %d", c.BatchSize)
	case c.Concurrency < 0:
		return fmt.Errorf("completer: Config.Concurrency must not be negative, got %d", c.Concurrency)
	}
	return nil
}

// Completer pushes abandoned ride requests to the end.
//
// Completers may run side by side: a key is claimed by one of them at a
// time, and its fresh lock keeps clients and other completers off it
// while it is worked.
type Completer struct {
	keys          *idem.Store
	service       *rides.Service
	minAge        time.Duration
	retryInterval time.Duration
	pollInterval  time.Duration
	batchSize     int
	concurrency   int
	logger        *slog.Logger
	loop          *loop.Loop
}

// New returns a Completer for config.
func New(config *Config) (*Completer, error) {
	if config == nil {
		return nil, errors.New("completer: Config is required (Keys and Service)")
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	c := &Completer{
		keys:          config.Keys,
		service:       config.Service,
		minAge:        cmp.Or(config.MinAge, DefaultMinAge),
		retryInterval: cmp.Or(config.RetryInterval, DefaultRetryInterval),
		pollInterval:  cmp.Or(config.PollInterval, DefaultPollInterval),
		batchSize:     cmp.Or(config.BatchSize, DefaultBatchSize),
		concurrency:   cmp.Or(config.Concurrency, DefaultConcurrency),
		logger:        cmp.Or(config.Logger, slog.Default()),
	}
	var err error
	c.loop, err = loop.New(&loop.Config{
		Work:         c.pass,
		PollInterval: c.pollInterval,
		Logger:       c.logger,
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}
