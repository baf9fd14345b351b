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
// The two take turns (alternate), new rides and then replays at 32
// clients.
func (r *run) stepRateLimits(ctx context.Context) error {
	on, err := r.fleet.Start(ctx, "api", rateLimitEnv(true)...)
	if err != nil {
		return err
	}
	defer func() { _ = on.Stop(context.WithoutCancel(ctx)) }()
	sides := []*fleet.Process{r.apis[0], on}
	figure := func(name, unit string, off, on LoadResult) {
		r.figure(Figure{Step: "3b rate limits", Name: name, Unit: unit, RatioOf: "RATE_LIMITS=off",
			Note: fmt.Sprintf("%d turns each, in alternation; off: %.0f %s; p50/p99 the worst turn's", rateLimitRounds, off.Rate, unit)},
			on, off.Rate)
	}

	newRides, cpu, err := r.alternate(ctx, sides, rateLimitRounds, r.newRidesIn("ratelimits"))
	if err != nil {
		return err
	}
	figure("new rides, limits on and not reached", "rides/s", newRides[0], newRides[1])
	r.rateLimitsCost = newRides[1].Rate / newRides[0].Rate
	// CPU per ride moves less than a rate with what else the machine
	// runs: the cost in the work itself.
	if cpu[0].rides > 0 && cpu[1].rides > 0 {
		offAPI, offPG := cpu[0].each()
		onAPI, onPG := cpu[1].each()
		r.add(Figure{Step: "3b rate limits", Name: "api + Postgres CPU per new ride, limits on", Clients: 32,
			Value: onAPI + onPG, Unit: "ms", Ratio: (onAPI + onPG) / (offAPI + offPG), RatioOf: "RATE_LIMITS=off",
			Note: fmt.Sprintf("api %.3f + Postgres %.3f ms; off: api %.3f + Postgres %.3f ms", onAPI, onPG, offAPI, offPG)})
	}

	rows, _ := r.db.Query(ctx, `SELECT idempotency_key FROM idempotency_keys WHERE recovery_point = 'finished' LIMIT 50000`)
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(keys) == 0 {
		return errors.Join(errors.New("find rides to replay"), err)
	}
	replays, _, err := r.alternate(ctx, sides, rateLimitRounds, func(_ int, api *fleet.Process) Load {
		return Load{Clients: 32, Check: replayed, Request: func(int, int) (*http.Request, error) {
			return newRide(api.URL, keys[rand.IntN(len(keys))])
		}}
	})
	if err != nil {
		return err
	}
	figure("replays, limits on and not reached", "responses/s", replays[0], replays[1])
	return nil
}

// newRidesIn is the load of a turn of step's (alternate): new rides at
// 32 clients on api, under keys of the step's own.
func (r *run) newRidesIn(step string) func(round int, api *fleet.Process) Load {
	return func(round int, api *fleet.Process) Load {
		return r.rideLoad(fmt.Sprintf("%s-%s-%d", step, api.Name, round), 32, []*fleet.Process{api})
	}
}

// alternate runs load on each of sides in turn, rounds times, the order
// rotated every round, so that whatever else the machine runs weighs on
// every side alike: a shared machine moves absolute rates by a fifth,
// more than the costs measured this way. It returns, for each side, the
// sum of what its turns measured (p50 and p99 the worst turn's), and the
// CPU its api and the cluster spent over them with the rides they made.
func (r *run) alternate(ctx context.Context, sides []*fleet.Process, rounds int,
	load func(round int, api *fleet.Process) Load,
) ([]LoadResult, []cpuUse, error) {
	sums, cpu := make([]LoadResult, len(sides)), make([]cpuUse, len(sides))
	for round := range rounds {
		for i := range sides {
			side := (i + round) % len(sides)
			l := load(round, sides[side])
			l.Warmup, l.Duration = r.sz.warmup/2, r.sz.short
			before, err := r.cpuUseOf(ctx, sides[side].Pid())
			if err != nil {
				return nil, nil, err
			}
			res, err := l.Run(ctx)
			if err != nil {
				return nil, nil, err
			}
			after, err := r.cpuUseOf(ctx, sides[side].Pid())
			if err != nil {
				return nil, nil, err
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
	return sums, cpu, nil
}

// each is the api's CPU (user and system) and Postgres's, in ms, per ride
// of the sums alternate made; zero for no rides.
func (c cpuUse) each() (api, postgres float64) {
	if c.rides <= 0 {
		return 0, 0
	}
	return ms(c.apiUser) / float64(c.rides), ms(c.postgres) / float64(c.rides)
}

// rateLimitsTarget is the most new rides the limits may cost, on and not
// reached: a twentieth.
const rateLimitsTarget = 0.95
