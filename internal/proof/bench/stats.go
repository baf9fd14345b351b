package bench

import (
	"math"
	"slices"
	"time"
)

// Summary describes a set of request latencies.
type Summary struct {
	Count int
	Mean  time.Duration
	P50   time.Duration
	P90   time.Duration
	P99   time.Duration
	Max   time.Duration
}

// Summarize sorts latencies in place and summarises them.
func Summarize(latencies []time.Duration) Summary {
	if len(latencies) == 0 {
		return Summary{}
	}
	slices.Sort(latencies)
	var total time.Duration
	for _, l := range latencies {
		total += l
	}
	return Summary{
		Count: len(latencies),
		Mean:  total / time.Duration(len(latencies)),
		P50:   Percentile(latencies, 50),
		P90:   Percentile(latencies, 90),
		P99:   Percentile(latencies, 99),
		Max:   latencies[len(latencies)-1],
	}
}

// Percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method: the smallest value that at least p percent of the
// values are at or below. Every answer is a latency that was observed, so
// a p99 is never an interpolation between two requests.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	if p <= 0 {
		return sorted[0]
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// ms renders a duration as fractional milliseconds, the unit of every
// latency in the report.
func ms(d time.Duration) float64 {
	return math.Round(float64(d.Microseconds())/10) / 100
}
