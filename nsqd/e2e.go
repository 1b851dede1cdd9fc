package nsqd

import (
	"time"

	"github.com/nsqgo/nsq/internal/quantile"
)

// latencyStats records end-to-end processing latency (publish to FIN) for
// --e2e-processing-latency-percentile. nil when no percentile is set.
type latencyStats struct {
	q *quantile.Quantile
}

func newLatencyStats(window time.Duration, percentiles []float64) *latencyStats {
	if len(percentiles) == 0 {
		return nil
	}
	return &latencyStats{q: quantile.New(window, percentiles)}
}

func (l *latencyStats) observe(ns int64) { l.q.Insert(ns, time.Now()) }

// result is the latency now; nil when it is not tracked.
func (l *latencyStats) result() *quantile.Result {
	if l == nil {
		return nil
	}
	return l.q.Result(time.Now())
}
