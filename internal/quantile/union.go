package quantile

import "time"

// Union accumulates the windows of several Quantiles into one sketch, the
// way a topic reports the latency of all its channels together. Adding a
// Quantile copies its counters (at most maxBins of them), so the sources are
// locked only briefly. The zero value is ready to use; Reset keeps the
// memory for the next round, so a scrape of many topics reuses one Union.
type Union struct {
	s     sketch
	total uint64
	sum   float64
}

// Reset empties u, keeping its memory.
func (u *Union) Reset() {
	u.s.clearKeep()
	u.total, u.sum = 0, 0
}

// Add merges q's window as of now, and its totals, into u. A nil q adds
// nothing.
func (u *Union) Add(q *Quantile, now time.Time) {
	if q == nil {
		return
	}
	q.mu.Lock()
	q.advance(now)
	u.s.merge(&q.streams[0])
	u.s.merge(&q.streams[1])
	u.total += q.total
	u.sum += q.sum
	q.mu.Unlock()
}

// Count is the number of values in the merged windows.
func (u *Union) Count() uint64 { return u.s.n }

// Totals is the sum of the added Quantiles' Totals.
func (u *Union) Totals() (count uint64, sum float64) { return u.total, u.sum }

// Value returns the p-quantile of the merged windows (0 when empty).
func (u *Union) Value(p float64) float64 { return query(&u.s, &sketch{}, p) }

// mergeExact is Merge for results that all came from Quantile.Result.
func mergeExact(rs []*Result) (*Result, bool) {
	found := false
	for _, r := range rs {
		if r == nil || r.Percentiles == nil {
			continue
		}
		if r.src == nil {
			return nil, false
		}
		found = true
	}
	if !found {
		return nil, false
	}
	var u Union
	out := &Result{}
	for _, r := range rs {
		if r == nil || r.src == nil {
			continue
		}
		u.Add(r.src, r.at)
		for _, p := range r.Percentiles {
			if indexOf(out.Percentiles, p["quantile"]) < 0 {
				out.Percentiles = append(out.Percentiles, map[string]float64{"quantile": p["quantile"]})
			}
		}
	}
	out.Count = int(u.Count())
	for _, p := range out.Percentiles {
		p["value"] = u.Value(p["quantile"])
	}
	return out, true
}
