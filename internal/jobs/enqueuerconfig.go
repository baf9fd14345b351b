// Second reading: the Enqueuer, its EnqueuerConfig and their defaults,
// and the kinds of job it moves (enqueuer.go moves them).

package jobs

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/rocketrides/rocketrides/internal/platform/trace"
)

// Enqueuer defaults.
const (
	// DefaultBatchSize is the most staged jobs moved in one transaction:
	// large enough that a backlog drains in few round trips, small enough
	// that a batch's locks and its River insert stay short.
	DefaultBatchSize = 1000

	// DefaultPollInterval is how long an idle enqueuer waits for a NOTIFY
	// before looking anyway. A NOTIFY normally wakes it at once; the poll
	// only covers one lost while the listening connection was down.
	DefaultPollInterval = time.Second
)

// EnqueuerConfig configures an Enqueuer.
type EnqueuerConfig struct {
	// Pool is the database the jobs are staged in, and whose River queue
	// they are moved into. Required.
	Pool *pgxpool.Pool

	// Kinds are the jobs a worker exists for, one value of each args type
	// (such as ReceiptArgs{}); a type implementing
	// river.JobArgsWithInsertOpts brings its insert options. Required.
	//
	// The enqueuer moves only these kinds. A job nobody can work is
	// refused rather than inserted: River would error it on every attempt
	// until it is discarded, long after anyone looked. Left in staged_jobs
	// it waits, visible and logged, for an enqueuer and worker that know
	// it (for instance when the API was deployed with a new kind ahead of
	// the workers).
	Kinds []river.JobArgs

	// BatchSize is the most staged jobs moved in one transaction.
	// Defaults to DefaultBatchSize.
	BatchSize int

	// PollInterval is how long an idle enqueuer waits for a NOTIFY on
	// Channel before looking anyway, which covers a notification lost
	// while the listening connection was down. Defaults to
	// DefaultPollInterval.
	PollInterval time.Duration

	// Logger defaults to slog.Default().
	Logger *slog.Logger

	// OnMoved, when set, is told how many jobs each committed batch
	// moved (for metrics).
	OnMoved func(n int)
}

func (c *EnqueuerConfig) validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("jobs: EnqueuerConfig.Pool is required")
	case len(c.Kinds) == 0:
		return errors.New("jobs: EnqueuerConfig.Kinds must list at least one job kind")
	case c.BatchSize < 0:
		return fmt.Errorf("jobs: EnqueuerConfig.BatchSize must not be negative, got %d", c.BatchSize)
	case c.PollInterval < 0:
		return fmt.Errorf("jobs: EnqueuerConfig.PollInterval must not be negative, got %s", c.PollInterval)
	}
	return nil
}

// Enqueuer moves staged jobs into River once the transaction that staged
// them has committed, a batch at a time, each batch exactly once (see
// moveBatch in enqueuer.go).
type Enqueuer struct {
	pool         *pgxpool.Pool
	river        *river.Client[pgx.Tx]
	batchSize    int
	onMoved      func(n int)
	pollInterval time.Duration
	logger       *slog.Logger
	kinds        []string
	opts         map[string]river.InsertOpts

	mu                sync.Mutex
	lastUnknownReport time.Time
}

// NewEnqueuer returns an enqueuer moving jobs staged in config.Pool's database
// into the River queue of the same database.
func NewEnqueuer(config *EnqueuerConfig) (*Enqueuer, error) {
	if config == nil {
		return nil, errors.New("jobs: EnqueuerConfig is required (EnqueuerConfig.Pool and EnqueuerConfig.Kinds)")
	}
	if err := config.validate(); err != nil {
		return nil, err
	}
	logger := cmp.Or(config.Logger, slog.Default())
	// Without Queues the client only inserts: it starts no producers and
	// needs no Start.
	client, err := river.NewClient(riverpgxv5.New(config.Pool), &river.Config{Logger: logger, Middleware: trace.RiverMiddleware(false)})
	if err != nil {
		return nil, fmt.Errorf("create river insert client: %w", err)
	}
	kinds := kindOpts(config.Kinds)
	return &Enqueuer{
		pool:         config.Pool,
		river:        client,
		batchSize:    cmp.Or(config.BatchSize, DefaultBatchSize),
		onMoved:      config.OnMoved,
		pollInterval: cmp.Or(config.PollInterval, DefaultPollInterval),
		logger:       logger,
		kinds:        slices.Sorted(maps.Keys(kinds)),
		opts:         kinds,
	}, nil
}

// kindOpts maps each kind to the insert options it asks for.
func kindOpts(args []river.JobArgs) map[string]river.InsertOpts {
	kinds := make(map[string]river.InsertOpts, len(args))
	for _, a := range args {
		var opts river.InsertOpts
		if withOpts, ok := a.(river.JobArgsWithInsertOpts); ok {
			opts = withOpts.InsertOpts()
		}
		kinds[a.Kind()] = opts
	}
	return kinds
}
