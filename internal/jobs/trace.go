// Second reading: a staged job's trace. The phase that stages a job
// stores its request's traceparent with it (Stage), and the enqueuer hands
// that traceparent to River in the job's metadata, where the worker's
// River middleware (trace.RiverMiddleware) finds it and links the job's
// span to the request that staged it, minutes or hours later.

package jobs

import (
	"github.com/riverqueue/river"

	"github.com/rocketrides/rocketrides/internal/platform/trace"
)

// traceOf is the traceparent of the request whose phase q is, when q is
// one (idem.Tx) and the request is traced; nil otherwise.
func traceOf(q Queuer) *string {
	if t, ok := q.(interface{ Traceparent() *string }); ok {
		return t.Traceparent()
	}
	return nil
}

// withTrace is opts for a job staged by the request traceparent names.
func withTrace(opts river.InsertOpts, traceparent *string) *river.InsertOpts {
	if traceparent != nil {
		opts.Metadata = trace.Metadata(traceparent)
	}
	return &opts
}
