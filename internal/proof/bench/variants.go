package bench

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	//go:embed replay.sql
	replayScript string
	//go:embed replay_locking.sql
	replayLockingScript string
)

// withoutNotify is script staging its job without the NOTIFY.
func withoutNotify(script string) string {
	return strings.ReplaceAll(script, "SELECT pg_notify('staged_jobs', '') FROM staged;", "SELECT id FROM staged;")
}

// variant is a change to the ride's SQL, measured with pgbench at 32
// clients against the same script unchanged, on a fresh database.
type variant struct {
	name   string
	script string
	// replays scripts read finished keys, which ride.sql makes first.
	replays bool
}

var variants = []variant{
	{name: "ride.sql unchanged", script: rideScript},
	{name: "without pg_notify", script: withoutNotify(rideScript)},
	{name: "replay: one statement, no lock (the api)", script: replayScript, replays: true},
	{name: "replay: claim, then SELECT ... FOR UPDATE", script: replayLockingScript, replays: true},
}

// stepVariants measures what each candidate optimisation of the ride's
// SQL would raise the limit to. Opt-in (Config.Variants): it adds a
// minute and a half.
func (r *run) stepVariants(ctx context.Context) error {
	const db = "bench_variant"
	for i, v := range variants {
		uid, err := r.limitDatabase(ctx, db)
		if err != nil {
			return err
		}
		conn, err := pgx.Connect(ctx, r.benchURL(db))
		if err != nil {
			return err
		}
		defines := limitDefines(uid, fmt.Sprintf("%sv%d", r.runID, i))
		if v.replays {
			seed, err := r.writeScript("ride.sql", rideScript)
			if err == nil {
				_, err = r.pgbench(ctx, db, seed, 8, 3*time.Second, defines)
			}
			var minID, maxID int64
			if err == nil {
				err = conn.QueryRow(ctx, `SELECT min(id), max(id) FROM idempotency_keys WHERE recovery_point = 'finished'`).Scan(&minID, &maxID)
			}
			if err != nil {
				conn.Close(context.WithoutCancel(ctx))
				return fmt.Errorf("variant %q: finish some keys: %w", v.name, err)
			}
			defines = append(defines, fmt.Sprintf("minid=%d", minID), fmt.Sprintf("maxid=%d", maxID))
		}
		conn.Close(context.WithoutCancel(ctx))
		script, err := r.writeScript(fmt.Sprintf("variant-%d.sql", i), v.script)
		if err != nil {
			return err
		}
		res, err := r.pgbench(ctx, db, script, 32, r.sz.step, defines)
		if err != nil {
			return fmt.Errorf("variant %q: %w", v.name, err)
		}
		unit := "rides/s"
		if v.replays {
			unit = "replays/s"
		}
		fig := Figure{Step: "1b variants (pgbench)", Name: v.name, Clients: 32, Value: res.TPS, Unit: unit,
			Errors: int(res.Failed), Note: fmt.Sprintf("latency avg %.1f ms", res.LatencyMs)}
		if !v.replays && r.variantBase > 0 {
			fig.Ratio, fig.RatioOf = res.TPS/r.variantBase, "ride.sql unchanged"
		}
		if i == 0 {
			r.variantBase = res.TPS
		}
		r.add(fig)
	}
	return nil
}
