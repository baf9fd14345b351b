package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/rocketrides/rocketrides/internal/testkit/fleet"
)

// rateLimitRounds is how many turns each api takes in stepRateLimits.
const rateLimitRounds = 3

// stepRateLimits measures what the rate limits cost when they are on and
// not reached: an api with every limit on, each too high to be reached,
// against the first api, with RATE_LIMITS=off (with -limits both count).
// The two take turns, new rides and then replays at 32 clients, the order
// swapped every round, so that whatever else the machine runs weighs on
// both alike: a shared machine moves absolute rates by a fifth, far more
// than the cost measured.
func (r *run) stepRateLimits(ctx context.Context) error {
	on, err := r.fleet.Start(ctx, "api", rateLimitEnv(true)...)
	if err != nil {
		return err
	}
	defer func() { _ = on.Stop(context.WithoutCancel(ctx)) }()
	sides := []*fleet.Process{r.apis[0], on}
	warmup, d := r.sz.warmup/2, r.sz.short

	// turns runs load on each api in turn, rateLimitRounds times, and
	// sums what each side measured; cpu[side] sums the CPU the side's api
	// and the cluster spent over its turns, and the rides they made.
	var cpu [2]cpuUse
	turns := func(load func(round int, api *fleet.Process) Load) (off, on LoadResult, err error) {
		var sums [2]LoadResult
		for round := range rateLimitRounds {
			for i := range 2 {
				side := (i + round) % 2
				l := load(round, sides[side])
				l.Warmup, l.Duration = warmup, d
				before, err := r.cpuUseOf(ctx, sides[side].Pid())
				if err != nil {
					return off, on, err
				}
				res, err := l.Run(ctx)
				if err != nil {
					return off, on, err
				}
				after, err := r.cpuUseOf(ctx, sides[side].Pid())
				if err != nil {
					return off, on, err
				}
				c := &cpu[side]
				c.apiUser += after.apiUser - before.apiUser + after.apiSystem - before.apiSystem
				c.postgres += after.postgres - before.postgres
				c.rides += after.rides - before.rides
				s := &sums[side]
				s.Clients, s.OK, s.Errors, s.Elapsed = res.Clients, s.OK+res.OK, s.Errors+res.Errors, s.Elapsed+res.Elapsed
				s.P50, s.P99 = max(s.P50, res.P50), max(s.P99, res.P99)
			}
		}
		for i := range sums {
			sums[i].Rate = float64(sums[i].OK) / sums[i].Elapsed.Seconds()
		}
		return sums[0], sums[1], nil
	}
	figure := func(name, unit string, off, on LoadResult) {
		r.figure(Figure{Step: "3b rate limits", Name: name, Unit: unit, RatioOf: "RATE_LIMITS=off",
			Note: fmt.Sprintf("%d turns each, in alternation; off: %.0f %s; p50/p99 the worst turn's", rateLimitRounds, off.Rate, unit)},
			on, off.Rate)
	}

	offNew, onNew, err := turns(func(round int, api *fleet.Process) Load {
		return r.rideLoad(fmt.Sprintf("ratelimits-%s-%d", api.Name, round), 32, []*fleet.Process{api})
	})
	if err != nil {
		return err
	}
	figure("new rides, limits on and not reached", "rides/s", offNew, onNew)
	r.rateLimitsCost = onNew.Rate / offNew.Rate
	// CPU per ride moves less than a rate with what else the machine
	// runs: the cost in the work itself.
	perRide := func(c cpuUse) (api, postgres float64) {
		return ms(c.apiUser) / float64(c.rides), ms(c.postgres) / float64(c.rides)
	}
	if cpu[0].rides > 0 && cpu[1].rides > 0 {
		offAPI, offPG := perRide(cpu[0])
		onAPI, onPG := perRide(cpu[1])
		r.add(Figure{Step: "3b rate limits", Name: "api + Postgres CPU per new ride, limits on", Clients: 32,
			Value: onAPI + onPG, Unit: "ms", Ratio: (onAPI + onPG) / (offAPI + offPG), RatioOf: "RATE_LIMITS=off",
			Note: fmt.Sprintf("api %.3f + Postgres %.3f ms; off: api %.3f + Postgres %.3f ms", onAPI, onPG, offAPI, offPG)})
	}

	rows, _ := r.db.Query(ctx, `SELECT idempotency_key FROM idempotency_keys WHERE recovery_point = 'finished' LIMIT 50000`)
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(keys) == 0 {
		return errors.Join(errors.New("find rides to replay"), err)
	}
	offReplay, onReplay, err := turns(func(_ int, api *fleet.Process) Load {
		return Load{Clients: 32, Check: replayed, Request: func(int, int) (*http.Request, error) {
			return newRide(api.URL, keys[rand.IntN(len(keys))])
		}}
	})
	if err != nil {
		return err
	}
	figure("replays, limits on and not reached", "responses/s", offReplay, onReplay)
	return nil
}

// rateLimitsTarget is the most new rides the limits may cost, on and not
// reached: a twentieth.
const rateLimitsTarget = 0.95
