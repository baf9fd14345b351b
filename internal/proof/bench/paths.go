package bench

import (
	"context"
	"fmt"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet"
)

// stepPlain measures new rides on the key store's plain path
// (IDEMPOTENCY_PIPELINE=off), as the new step measures them on the fast
// path at 32 clients, on an api of its own: how many a second, and what
// each cost the api and Postgres. The report sets the two side by side
// (Report.Paths), with each path's round trips and statements, captured.
func (r *run) stepPlain(ctx context.Context) error {
	api, err := r.fleet.Start(ctx, "api", idem.Pipeline+"=off")
	if err != nil {
		return err
	}
	defer func() { _ = api.Stop(context.WithoutCancel(ctx)) }()
	l := r.rideLoad("plain32", 32, []*fleet.Process{api})
	before, err := r.cpuUseOf(ctx, api.Pid())
	if err != nil {
		return err
	}
	fast := r.newRides[32].Rate
	res, err := r.measure(ctx, l, Figure{Step: "2 new rides", Name: "POST /rides, fresh key, plain path (IDEMPOTENCY_PIPELINE=off)",
		Unit: "rides/s", RatioOf: "the fast path's, 32 clients"}, fast, timeWait)
	if err != nil {
		return err
	}
	after, err := r.cpuUseOf(ctx, api.Pid())
	if err != nil {
		return err
	}
	per := before.perRide(after)
	if per.rides == 0 {
		return fmt.Errorf("no rides made on the plain path")
	}
	p := &r.report.Paths.Plain
	p.Rate, p.APICPUMs, p.PostgresCPUMs = res.Rate, ms(per.apiUser+per.apiSystem), ms(per.postgres)
	r.add(Figure{Step: "2 new rides", Name: "api CPU per new ride, plain path", Clients: 32, Value: p.APICPUMs, Unit: "ms",
		Note: fmt.Sprintf("fast path %s ms; over %d rides", formatFloat(r.report.Paths.Fast.APICPUMs), per.rides)})
	r.add(Figure{Step: "2 new rides", Name: "Postgres CPU per new ride, plain path", Clients: 32, Value: p.PostgresCPUMs, Unit: "ms",
		Note: fmt.Sprintf("fast path %s ms", formatFloat(r.report.Paths.Fast.PostgresCPUMs))})
	return nil
}
