// Second reading: the connection the enqueuer LISTENs on, so that a
// staged job wakes it at commit (run.go waits on it), and how it
// reconnects when the connection breaks.

package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketrides/rocketrides/internal/platform/loop"
)

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
