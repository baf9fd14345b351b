package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// drain starts command (in its loop mode, as it runs in production) with
// env and polls the count query until it reaches zero or limit passes,
// then records the command's rate on the n rows it started with.
func (r *run) drain(ctx context.Context, command, name, unit string, n int64, limit time.Duration, query string, env ...string) error {
	begin := time.Now()
	p, err := r.fleet.Start(ctx, command, env...)
	if err != nil {
		return err
	}
	defer p.Stop(context.WithoutCancel(ctx))
	var left int64
	for ; time.Since(begin) < limit; time.Sleep(100 * time.Millisecond) {
		if err := r.db.QueryRow(ctx, query).Scan(&left); err != nil || left == 0 {
			break
		} else if !p.Running() {
			return fmt.Errorf("%s exited (%v); see %s", p.Name, p.ExitErr(), p.LogPath)
		}
	}
	elapsed := time.Since(begin)
	note := fmt.Sprintf("%.1fs; loop mode %v; includes process start", elapsed.Seconds(), env)
	if left > 0 {
		note += fmt.Sprintf("; stopped with %d left", left)
	}
	r.add(Figure{Step: "6 background", Name: name, Value: float64(n-left) / elapsed.Seconds(), Unit: unit, Note: note})
	return ctx.Err()
}

// stepEnqueuer measures how fast the enqueuer moves staged jobs into
// River: only generated ones, so that it drains exactly n.
func (r *run) stepEnqueuer(ctx context.Context) error {
	if _, err := r.db.Exec(ctx, `
		TRUNCATE staged_jobs;
		INSERT INTO staged_jobs (job_name, job_args)
		SELECT 'send_ride_receipt', jsonb_build_object('ride_id', 1000000000 + g, 'user_id', `+strconv.FormatInt(r.userID, 10)+`,
		       'amount', 2000, 'currency', 'usd', 'stripe_charge_id', 'ch_staged_' || g)
		FROM generate_series(1, `+strconv.FormatInt(r.sz.stagedJobs, 10)+`) AS g`); err != nil {
		return fmt.Errorf("stage jobs: %w", err)
	}
	if _, err := r.vacuum(ctx, "staged_jobs"); err != nil {
		return err
	}
	return r.drain(ctx, "enqueuer", fmt.Sprintf("enqueuer: drain %s staged jobs", count(r.sz.stagedJobs)), "jobs/s",
		r.sz.stagedJobs, r.sz.backgroundCap,
		`SELECT count(*) FROM staged_jobs`)
}

// stepCompleter measures how fast the completer finishes abandoned
// requests: keys left at started an hour ago, unlocked, as a crashed api
// leaves them.
func (r *run) stepCompleter(ctx context.Context) error {
	if _, err := r.db.Exec(ctx, `
		INSERT INTO idempotency_keys (created_at, idempotency_key, last_run_at, locked_at,
			request_method, request_params, request_path, origin_ip, recovery_point, user_id)
		SELECT now() - interval '1 hour', 'abandoned-' || $1 || g, now() - interval '1 hour', NULL,
		       'POST', $2::jsonb, '/rides', '127.0.0.1', 'started', $3
		FROM generate_series(1, $4::bigint) AS g`, r.runID, rideBody, r.userID, r.sz.completerKeys); err != nil {
		return fmt.Errorf("create abandoned keys: %w", err)
	}
	// Batches of a tenth of the keys; what follows may need two and a half
	// minutes: the reaper's baseline and a minute of reaping.
	return r.drain(ctx, "completer", fmt.Sprintf("completer: finish %s abandoned keys", count(r.sz.completerKeys)), "keys/s",
		r.sz.completerKeys,
		r.capFor(r.sz.backgroundCap, 150*time.Second),
		`SELECT count(*) FROM idempotency_keys WHERE idempotency_key LIKE 'abandoned-%' AND recovery_point <> 'finished'`,
		"COMPLETER_MIN_AGE=1m", "COMPLETER_RETRY_INTERVAL=1s", fmt.Sprintf("COMPLETER_BATCH_SIZE=%d", max(r.sz.completerKeys/10, 100)))
}

// stepReaper measures how long the reaper takes to remove the expired
// keys, and the api's latency at 32 clients while it does, against just
// before. A reaper still at work after reaperCap is stopped (SIGTERM: it
// finishes its batch) and its rate extrapolated.
func (r *run) stepReaper(ctx context.Context) error {
	if !r.expiredDone {
		if err := r.loadExpired(ctx, "6 background", r.expiredBatch()); err != nil {
			return err
		}
	}
	expired, err := r.countExpired(ctx)
	if err != nil {
		return err
	}
	// The api on its own, just before, for as long as the reaper will be
	// given: a p99 over a longer window catches more of the rare stalls
	// (a checkpoint, an autovacuum) that happen with or without a reaper,
	// so the two windows must be equally long to compare.
	limit := r.capFor(r.sz.reaperCap, 10*time.Second)
	l := r.rideLoad("reapbase", 32, r.apis[:1], false)
	l.Duration = limit
	if r.reaperBase, err = l.Run(ctx); err != nil {
		return err
	}
	r.add(loadFigure("6 background", "new rides before the reaper", r.reaperBase, "rides/s"))

	begin := time.Now()
	p, err := r.fleet.StartArgs(ctx, "reaper", []string{"-once"}, "REAPER_MAX_AGE="+reaperMaxAge.String())
	if err != nil {
		return err
	}
	l = r.rideLoad("reaping", 32, r.apis[:1], false)
	l.Warmup, l.Duration, l.Stop = 0, limit, p.Done()
	r.reaperLoad, err = l.Run(ctx)
	elapsed, stopped, exit := time.Since(begin), p.Running(), p.ExitErr()
	if stopped {
		exit = p.Stop(context.WithoutCancel(ctx))
	}
	if err := errors.Join(err, exit); err != nil {
		return fmt.Errorf("reaper -once: %w; see %s", err, p.LogPath)
	}
	left, err := r.countExpired(ctx)
	if err != nil {
		return err
	}
	removed, value := expired-left, elapsed.Seconds()
	note := fmt.Sprintf("%.0f keys/s; cmd/reaper -once (REAPER_MAX_AGE=%s, default batch size)", float64(removed)/value, reaperMaxAge)
	if stopped && removed > 0 && removed < expired {
		value *= float64(expired) / float64(removed)
		note = fmt.Sprintf("EXTRAPOLATED: stopped after %.0fs with %d of %d removed; ", elapsed.Seconds(), removed, expired) + note
	}
	r.add(Figure{Step: "6 background", Name: fmt.Sprintf("reaper: remove %s expired keys", count(expired)), Value: value, Unit: "s", Note: note})
	fig := loadFigure("6 background", "new rides while the reaper runs", r.reaperLoad, "rides/s")
	fig.ratio(r.reaperBase.Rate, "before the reaper")
	r.add(fig)
	return nil
}

func (r *run) countExpired(ctx context.Context) (n int64, err error) {
	err = r.db.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE created_at < now() - $1::interval`, reaperMaxAge).Scan(&n)
	return n, err
}
