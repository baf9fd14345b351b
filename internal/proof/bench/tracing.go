package bench

import (
	"context"
	"fmt"

	"github.com/rocketrides/rocketrides/internal/platform/trace"
	"github.com/rocketrides/rocketrides/internal/testkit/fleet"
	"github.com/rocketrides/rocketrides/internal/testkit/otlpsink"
)

// tracingRounds is how many turns each api takes in stepTracing.
const tracingRounds = 3

// stepTracing measures what tracing costs the api: new rides a second at
// 32 clients, and the api's CPU per ride, with tracing off (the first
// api), on at the default sampler, and with every trace sampled. Each
// traced api exports over gRPC, with the SDK's default batching, to an
// OTLP receiver of its own in this process, which counts the spans a ride
// sent. The three take turns (alternate); the report gives each traced
// api as a ratio to the one that does not trace.
func (r *run) stepTracing(ctx context.Context) error {
	sides := []*fleet.Process{r.apis[0]}
	names := []string{"tracing off"}
	var sinks []*otlpsink.Sink
	for _, on := range []struct {
		name string
		env  []string
	}{
		// The default sampler is what a process gets without the setting.
		{fmt.Sprintf("tracing on, default sampler (%s %g)", trace.DefaultSampler, trace.DefaultSamplerArg), nil},
		{"tracing on, every trace sampled (always_on)", []string{trace.SamplerSetting + "=always_on"}},
	} {
		sink, err := otlpsink.Start()
		if err != nil {
			return err
		}
		defer sink.Close()
		api, err := r.fleet.Start(ctx, "api", append(on.env, trace.EndpointSetting+"="+sink.GRPC)...)
		if err != nil {
			return err
		}
		defer func() { _ = api.Stop(context.WithoutCancel(ctx)) }()
		sides, names, sinks = append(sides, api), append(names, on.name), append(sinks, sink)
	}

	rides, cpu, err := r.alternate(ctx, sides, tracingRounds, r.newRidesIn("tracing"))
	if err != nil {
		return err
	}
	offAPI, _ := cpu[0].each()
	for i, res := range rides {
		api, postgres := cpu[i].each()
		note := fmt.Sprintf("%d turns each, in alternation; api CPU %.3f ms per ride", tracingRounds, api)
		off := 0.0 // no ratio for off itself
		if i > 0 {
			off = rides[0].Rate
			// A stopped api has sent every span it held.
			if err := sides[i].Stop(ctx); err != nil {
				return err
			}
			note += fmt.Sprintf(" (%.2f x off), Postgres %.3f ms; %.1f spans per ride received",
				api/offAPI, postgres, float64(sinks[i-1].Count())/float64(cpu[i].rides))
		} else {
			note += fmt.Sprintf(", Postgres %.3f ms", postgres)
		}
		r.figure(Figure{Step: "3c tracing", Name: "new rides, " + names[i], Unit: "rides/s", RatioOf: "tracing off", Note: note},
			res, off)
	}
	return nil
}
