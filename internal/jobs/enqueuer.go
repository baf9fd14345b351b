package jobs

import (
	"cmp"
	"context"
	"encoding/json"
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

	"github.com/rocketrides/rocketrides/internal/platform/loop"
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

const (
	// batchTimeout bounds one batch, including the one Run finishes after
	// its context is cancelled, so a shutdown cannot hang on a dead
	// database.
	batchTimeout = 30 * time.Second

	// unknownKindsInterval is how often the enqueuer repeats its complaint
	// about staged jobs it refuses to move.
	unknownKindsInterval = time.Minute
)

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
// them has committed.
//
// Each batch deletes jobs from staged_jobs and inserts them into River in
// one transaction, so the handoff is exactly once: a crash between the
// two loses nothing (the delete rolls back with the insert), and
// enqueuers running side by side never move a job twice (rows one has
// locked are skipped by the others).
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
	client, err := river.NewClient(riverpgxv5.New(config.Pool), &river.Config{Logger: logger})
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

// stagedJob is a row of staged_jobs.
type stagedJob struct {
	ID      int64           `db:"id"`
	JobName string          `db:"job_name"`
	JobArgs json.RawMessage `db:"job_args"`
}

// stagedArgs carries a staged job into River as it was stored: River
// encodes job args with json.Marshal, which returns these bytes as they
// are. Passing them through rather than decoding into the concrete args
// type keeps any field this build does not know about.
type stagedArgs struct {
	kind string
	args json.RawMessage
}

func (a stagedArgs) Kind() string                 { return a.kind }
func (a stagedArgs) MarshalJSON() ([]byte, error) { return a.args, nil }

// RunOnce moves one batch of staged jobs into River and reports how many
// it moved. Zero means there was nothing to move.
func (e *Enqueuer) RunOnce(ctx context.Context) (int, error) {
	moved, err := e.moveBatch(ctx)
	if err != nil {
		return 0, err
	}
	if e.onMoved != nil && moved > 0 {
		e.onMoved(moved)
	}
	// A short batch means the queue is drained of everything movable;
	// anything left is either locked by another enqueuer or refused.
	if moved < e.batchSize {
		e.reportUnknownKinds(ctx)
	}
	return moved, nil
}

func (e *Enqueuer) moveBatch(ctx context.Context) (int, error) {
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin enqueuer batch: %w", err)
	}
	defer func() {
		// After a successful commit this is a no-op.
		if err := tx.Rollback(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
			e.logger.ErrorContext(ctx, "Roll back enqueuer batch", slog.Any("error", err))
		}
	}()

	// SKIP LOCKED lets enqueuers share the table: each takes rows no
	// other transaction holds, and a row deleted by a committed batch is
	// gone for everyone. The ORDER BY keeps the handoff roughly first
	// staged, first queued.
	rows, err := tx.Query(ctx, `
		WITH moved AS (
			DELETE FROM staged_jobs
			WHERE id IN (
				SELECT id
				FROM staged_jobs
				WHERE job_name = ANY($2)
				ORDER BY id
				LIMIT $1
				FOR UPDATE SKIP LOCKED
			)
			RETURNING id, job_name, job_args
		)
		SELECT id, job_name, job_args FROM moved ORDER BY id`,
		e.batchSize, e.kinds,
	)
	if err != nil {
		return 0, fmt.Errorf("take staged jobs: %w", err)
	}
	staged, err := pgx.CollectRows(rows, pgx.RowToStructByName[stagedJob])
	if err != nil {
		return 0, fmt.Errorf("take staged jobs: %w", err)
	}
	if len(staged) == 0 {
		return 0, nil
	}

	params := make([]river.InsertManyParams, 0, len(staged))
	seen := make(map[string]bool)
	batchDuplicates := 0
	for _, job := range staged {
		opts := e.opts[job.JobName]
		// River inserts the batch in one INSERT ... ON CONFLICT on the
		// unique key, and Postgres refuses a statement that hits the same
		// key twice, so two staged copies of one unique job would fail
		// this batch on every attempt. Keep the first: River would have
		// skipped the second anyway. job_args comes back as jsonb text,
		// so equal args are equal strings.
		if key, unique := uniqueKey(job, opts.UniqueOpts); unique {
			if seen[key] {
				batchDuplicates++
				continue
			}
			seen[key] = true
		}
		params = append(params, river.InsertManyParams{
			Args:       stagedArgs{kind: job.JobName, args: job.JobArgs},
			InsertOpts: &opts,
		})
	}
	results, err := e.river.InsertManyTx(ctx, tx, params)
	if err != nil {
		return 0, fmt.Errorf("insert %d staged jobs (ids %d..%d) into river: %w",
			len(staged), staged[0].ID, staged[len(staged)-1].ID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit enqueuer batch of %d: %w", len(staged), err)
	}

	duplicates := batchDuplicates
	for _, r := range results {
		if r.UniqueSkippedAsDuplicate {
			duplicates++
		}
	}
	e.logger.InfoContext(ctx, "Moved staged jobs into River",
		slog.Int("jobs", len(staged)),
		slog.Int("unique_duplicates_skipped", duplicates),
		slog.Int64("first_staged_id", staged[0].ID),
		slog.Int64("last_staged_id", staged[len(staged)-1].ID),
	)
	return len(staged), nil
}

// uniqueKey returns what decides, within one batch, whether two staged
// jobs are the same unique job in River, and whether the kind is unique at
// all. Jobs of a batch share queue and insert time, so only kind and,
// with ByArgs, the args can tell them apart.
func uniqueKey(job stagedJob, opts river.UniqueOpts) (string, bool) {
	if !opts.ByArgs && opts.ByPeriod == 0 && !opts.ByQueue && opts.ByState == nil && !opts.ExcludeKind {
		return "", false
	}
	key := ""
	if !opts.ExcludeKind {
		key = job.JobName
	}
	if opts.ByArgs {
		key += "\x00" + string(job.JobArgs)
	}
	return key, true
}

// reportUnknownKinds logs, at most once per unknownKindsInterval, the staged
// jobs the enqueuer refuses to move because no worker handles their kind.
// They would otherwise wait silently forever.
func (e *Enqueuer) reportUnknownKinds(ctx context.Context) {
	e.mu.Lock()
	due := time.Since(e.lastUnknownReport) >= unknownKindsInterval
	if due {
		e.lastUnknownReport = time.Now()
	}
	e.mu.Unlock()
	if !due {
		return
	}

	type unknownKind struct {
		JobName string    `db:"job_name"`
		Staged  int64     `db:"staged"`
		Oldest  time.Time `db:"oldest"`
	}
	rows, err := e.pool.Query(ctx, `
		SELECT job_name, count(*) AS staged, min(created_at) AS oldest
		FROM staged_jobs
		WHERE job_name <> ALL($1)
		GROUP BY job_name
		ORDER BY job_name`,
		e.kinds,
	)
	if err == nil {
		var unknown []unknownKind
		unknown, err = pgx.CollectRows(rows, pgx.RowToStructByName[unknownKind])
		for _, u := range unknown {
			e.logger.ErrorContext(ctx, "Staged jobs of an unknown kind are not moved to River; deploy a worker for the kind or delete the jobs",
				slog.String("job_name", u.JobName),
				slog.Int64("staged", u.Staged),
				slog.Time("oldest", u.Oldest),
				slog.Any("known_kinds", e.kinds),
			)
		}
	}
	if err != nil {
		// Only the report failed; moving jobs goes on.
		e.logger.WarnContext(ctx, "Look for staged jobs of unknown kinds", slog.Any("error", err))
	}
}

// Run moves staged jobs into River until ctx is cancelled. A batch in
// progress when ctx is cancelled is finished, not abandoned.
//
// While there is work it moves batch after batch. When idle it waits for
// a NOTIFY on Channel, so a job reaches River right after the
// transaction that staged it commits, and polls every PollInterval in case
// a notification was missed. Database errors, including losing the
// listening connection when Postgres restarts, are logged and retried
// with backoff (package loop): the enqueuer outlives them.
//
// Run returns nil once ctx is cancelled.
func (e *Enqueuer) Run(ctx context.Context) error {
	l := &listener{pool: e.pool, logger: e.logger}
	defer l.close(ctx)

	// Listen before the first batch: a job staged between that batch and
	// the LISTEN would otherwise wait for the next poll.
	l.connect(ctx)

	lp, err := loop.New(&loop.Config{
		Work:         e.pass,
		PollInterval: e.pollInterval,
		Wait:         l.wait,
		Logger:       e.logger,
	})
	if err != nil {
		return err
	}
	return lp.Run(ctx)
}

// pass is one pass of Run's loop: one batch.
func (e *Enqueuer) pass(ctx context.Context) (more bool, err error) {
	// Detached from ctx so that a shutdown finishes the batch in hand;
	// batchTimeout keeps that bounded.
	batchCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
	defer cancel()
	moved, err := e.RunOnce(batchCtx)
	if err != nil {
		return false, fmt.Errorf("move staged jobs: %w", err)
	}
	// A full batch means more are probably waiting: go again at once.
	return moved == e.batchSize, nil
}

// listener holds the connection LISTENing on Channel. It is taken
// out of the pool for good (a LISTEN is session state that must not leak
// to another user of the pool) and reconnected when it breaks.
type listener struct {
	pool   *pgxpool.Pool
	logger *slog.Logger

	conn        *pgx.Conn
	backoff     time.Duration
	nextAttempt time.Time
}

// connect tries to listen, unless a recent failure asks to wait longer.
// On failure it logs and leaves conn nil; wait then polls.
func (l *listener) connect(ctx context.Context) {
	if l.conn != nil || time.Now().Before(l.nextAttempt) {
		return
	}
	conn, err := l.listen(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		l.backoff = min(max(l.backoff*2, loop.DefaultMinBackoff), loop.DefaultMaxBackoff)
		l.nextAttempt = time.Now().Add(l.backoff)
		l.logger.WarnContext(ctx, "Listen for staged jobs; polling until it succeeds",
			slog.Any("error", err), slog.Duration("retry_in", l.backoff))
		return
	}
	if l.backoff > 0 {
		l.logger.InfoContext(ctx, "Listening for staged jobs again")
	}
	l.conn, l.backoff = conn, 0
}

func (l *listener) listen(ctx context.Context) (*pgx.Conn, error) {
	pooled, err := l.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire listen connection: %w", err)
	}
	conn := pooled.Hijack()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{Channel}.Sanitize()); err != nil {
		l.closeConn(ctx, conn)
		return nil, fmt.Errorf("listen on %s: %w", Channel, err)
	}
	return conn, nil
}

// wait returns on a notification, after d, or when ctx is done, whichever
// comes first. Without a listening connection it only sleeps.
func (l *listener) wait(ctx context.Context, d time.Duration) {
	l.connect(ctx)
	if l.conn == nil {
		// Poll, but wake for the next attempt to listen again, so a
		// long poll interval does not also delay the reconnect.
		_ = loop.Sleep(ctx, min(d, max(time.Until(l.nextAttempt), 0))) // a shutdown is seen by the loop
		return
	}
	waitCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	// A notification that arrived while a batch was running is already
	// buffered on the connection, so this returns at once and the next
	// batch picks the job up: no wakeup is lost.
	_, err := l.conn.WaitForNotification(waitCtx)
	if err == nil || waitCtx.Err() != nil {
		// Notified, polled, or shutting down. A timed out wait leaves
		// the connection usable.
		return
	}
	l.logger.WarnContext(ctx, "Lost the connection listening for staged jobs; polling until it is back",
		slog.Any("error", err))
	l.closeConn(ctx, l.conn)
	l.conn = nil
	l.backoff = loop.DefaultMinBackoff
	l.nextAttempt = time.Now().Add(l.backoff)
	// Whatever was notified while the connection was failing may not
	// have been seen; look now.
}

func (l *listener) close(ctx context.Context) {
	if l.conn != nil {
		l.closeConn(ctx, l.conn)
		l.conn = nil
	}
}

func (l *listener) closeConn(ctx context.Context, conn *pgx.Conn) {
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// The connection is usually broken already, so a failure here is
	// expected and only worth a debug line.
	if err := conn.Close(closeCtx); err != nil {
		l.logger.DebugContext(ctx, "Close listen connection", slog.Any("error", err))
	}
}
