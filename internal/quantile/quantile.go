// Package quantile estimates end-to-end latency percentiles over a sliding
// window, as nsqd reports them in /stats and statsd
// (docs/protocol.md#stats-json, docs/protocol.md#statsd).
//
// Like NSQ, a Quantile keeps two streams that each cover half the window:
// values go into the current one; when a half-window has passed, the older
// stream is cleared and becomes current. A query merges both, so it sees
// between half a window and a whole window of data. Each stream is a
// log-bucketed sketch (see sketch.go) with a relative error of 2% and at
// most 4 KiB of counters, allocated only while it holds values.
package quantile

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Quantile is a sliding-window percentile estimator. A nil *Quantile is
// valid and disabled: Insert does nothing and Result reports NSQ's
// "disabled" shape, {"count":0,"percentiles":null}.
type Quantile struct {
	half        time.Duration
	percentiles []float64

	mu      sync.Mutex // guards the fields below
	streams [2]sketch
	cur     int       // index of the stream receiving values
	start   time.Time // when streams[cur] became current; zero before first use
	total   uint64    // values inserted since New, for Prometheus' _count
	sum     float64   // their sum, for Prometheus' _sum
}

// New returns a Quantile over window reporting the given percentiles, each
// in (0, 1]. It returns nil, a disabled Quantile, when percentiles is empty.
// It panics on a non-positive window or a percentile out of range: options
// are validated before this point, so that is a programming error.
func New(window time.Duration, percentiles []float64) *Quantile {
	if len(percentiles) == 0 {
		return nil
	}
	if window <= 0 {
		panic(fmt.Sprintf("quantile: window %v must be positive", window))
	}
	for _, p := range percentiles {
		if !(p > 0 && p <= 1) {
			panic(fmt.Sprintf("quantile: percentile %v not in (0, 1]", p))
		}
	}
	return &Quantile{
		half:        window / 2,
		percentiles: append([]float64(nil), percentiles...),
	}
}

// Insert records value v (nanoseconds for nsqd) observed at now. It is safe
// for concurrent use.
func (q *Quantile) Insert(v int64, now time.Time) {
	if q == nil {
		return
	}
	q.mu.Lock()
	q.advance(now)
	q.streams[q.cur].add(v)
	q.total++
	q.sum += float64(v)
	q.mu.Unlock()
}

// Totals returns how many values were inserted since New and their sum,
// whatever the window: the cumulative _count and _sum of a Prometheus
// summary, whose quantiles come from the window.
func (q *Quantile) Totals() (count uint64, sum float64) {
	if q == nil {
		return 0, 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.total, q.sum
}

// Percentiles returns the configured percentiles (do not modify).
func (q *Quantile) Percentiles() []float64 {
	if q == nil {
		return nil
	}
	return q.percentiles
}

// advance rotates the streams for the half-windows that have ended by now.
// The window's clock is started by the first call, so tests may drive it
// with any time. A clock going backwards rotates nothing. mu must be held.
func (q *Quantile) advance(now time.Time) {
	if q.start.IsZero() {
		q.start = now
		return
	}
	steps := now.Sub(q.start) / q.half
	switch {
	case steps <= 0:
		return
	case steps == 1:
		q.cur ^= 1
		q.streams[q.cur].reset()
	default: // both halves are older than the window
		q.streams[0].reset()
		q.streams[1].reset()
	}
	q.start = q.start.Add(steps * q.half)
}

// Result is the JSON shape NSQ uses for e2e_processing_latency: each
// percentile is a map {"quantile": q, "value": v}.
type Result struct {
	Count       int                  `json:"count"`
	Percentiles []map[string]float64 `json:"percentiles"`

	// src and at let Merge combine the sketches themselves rather than
	// their percentiles: the union's percentile is not any average of the
	// parts' percentiles.
	src *Quantile
	at  time.Time
}

// Result returns the count and percentiles of the values inserted during
// the current window as of now. With no values, each percentile is 0.
func (q *Quantile) Result(now time.Time) *Result {
	if q == nil {
		return &Result{}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.advance(now)
	a, b := &q.streams[0], &q.streams[1]
	r := &Result{
		Count:       int(a.n + b.n),
		Percentiles: make([]map[string]float64, len(q.percentiles)),
		src:         q,
		at:          now,
	}
	for i, p := range q.percentiles {
		r.Percentiles[i] = map[string]float64{"quantile": p, "value": query(a, b, p)}
	}
	return r
}

// Merge combines channel results into a topic result, as NSQ merges its
// channels' streams. Counts add up. When every result came from
// Quantile.Result, each percentile is that of the union of the channels'
// windows, from their sketches merged counter by counter (so as accurate as
// one channel's); the windows are read again at the time each Result was
// taken, so values inserted since then are included. Results built by hand
// fall back to the count-weighted average of the channels' values, which is
// exact only when the channels see the same distribution. Percentiles
// appear in the order first seen. Nil results are skipped; with no enabled
// result the percentiles are nil, NSQ's "disabled" shape.
func Merge(rs ...*Result) *Result {
	if out, ok := mergeExact(rs); ok {
		return out
	}
	out := &Result{}
	var sums, weights []float64 // per out.Percentiles entry
	for _, r := range rs {
		if r == nil {
			continue
		}
		out.Count += r.Count
		for _, p := range r.Percentiles {
			j := indexOf(out.Percentiles, p["quantile"])
			if j < 0 {
				j = len(out.Percentiles)
				out.Percentiles = append(out.Percentiles, map[string]float64{"quantile": p["quantile"]})
				sums, weights = append(sums, 0), append(weights, 0)
			}
			sums[j] += p["value"] * float64(r.Count)
			weights[j] += float64(r.Count)
		}
	}
	for j, p := range out.Percentiles {
		p["value"] = 0
		if weights[j] > 0 {
			p["value"] = math.Round(sums[j] / weights[j])
		}
	}
	return out
}

func indexOf(ps []map[string]float64, quantile float64) int {
	for i, p := range ps {
		if p["quantile"] == quantile {
			return i
		}
	}
	return -1
}
