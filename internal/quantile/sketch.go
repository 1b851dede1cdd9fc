package quantile

import "math"

// A sketch is a log-bucketed histogram (the DDSketch idea): a value v > 0
// goes into bin i = ceil(log_γ v), which covers (γ^(i-1), γ^i]. Reporting a
// bin as 2γ^i/(γ+1) is within relAccuracy of every value in it, so any
// quantile is answered with a bounded *relative* error, which is what
// latency figures need (±2% of 3 ms or of 3 s alike).
//
// Unlike a CKMS targeted-quantile stream, memory has a hard bound: bins is
// one contiguous run of at most maxBins counters, allocated as values
// arrive. With γ ≈ 1.04, 512 bins span nine decades (1 µs to 15 min in ns);
// if values spread wider, the lowest bins are folded together, losing
// accuracy only for the smallest values, which latency percentiles do not
// ask about. Two sketches merge exactly by adding counters.
type sketch struct {
	bins   []uint64 // bins[j] counts values in bin offset+j
	offset int
	zeros  uint64 // values <= 0 (clock steps can make latencies negative)
	n      uint64
	min    int64 // smallest and largest value; valid when n > 0
	max    int64
}

const (
	relAccuracy = 0.02
	maxBins     = 512
)

var (
	gamma       = (1 + relAccuracy) / (1 - relAccuracy)
	invLogGamma = 1 / math.Log(gamma)
)

func binOf(v int64) int { return int(math.Ceil(math.Log(float64(v)) * invLogGamma)) }

// binValue is the representative value of bin i.
func binValue(i int) float64 { return 2 * math.Pow(gamma, float64(i)) / (gamma + 1) }

func (s *sketch) add(v int64) {
	v = max(v, 0)
	if s.n == 0 || v < s.min {
		s.min = v
	}
	if s.n == 0 || v > s.max {
		s.max = v
	}
	s.n++
	if v == 0 {
		s.zeros++
		return
	}
	s.addBin(binOf(v), 1)
}

// merge adds every value of o to s: counters add up, so the union is as
// accurate as each part (up to the maxBins fold of the lowest bins).
func (s *sketch) merge(o *sketch) {
	if o.n == 0 {
		return
	}
	if s.n == 0 || o.min < s.min {
		s.min = o.min
	}
	if s.n == 0 || o.max > s.max {
		s.max = o.max
	}
	s.n += o.n
	s.zeros += o.zeros
	for j, c := range o.bins {
		if c > 0 {
			s.addBin(o.offset+j, c)
		}
	}
}

// addBin counts c values in bin i.
func (s *sketch) addBin(i int, c uint64) {
	if len(s.bins) == 0 {
		s.offset = i
		s.resize(1)
	}
	lo, hi := s.offset, s.offset+len(s.bins)-1
	switch {
	case i < lo:
		if hi-i >= maxBins {
			i = hi - maxBins + 1 // too far below: count it in the lowest bin kept
		}
		if i < lo {
			s.growDown(i)
		}
	case i > hi:
		if i-lo >= maxBins {
			s.foldBelow(i - maxBins + 1)
		}
		s.resize(i - s.offset + 1)
	}
	s.bins[i-s.offset] += c
}

// resize sets len(bins) to n, zeroing new counters, and caps the capacity
// at maxBins so the bound on memory holds.
func (s *sketch) resize(n int) {
	if n <= cap(s.bins) {
		old := len(s.bins)
		s.bins = s.bins[:n]
		clear(s.bins[old:])
		return
	}
	nb := make([]uint64, n, min(max(n, 2*cap(s.bins), 8), maxBins))
	copy(nb, s.bins)
	s.bins = nb
}

// growDown makes bin i, below offset, the first bin.
func (s *sketch) growDown(i int) {
	shift := s.offset - i
	n := len(s.bins) + shift
	nb := s.bins
	if n > cap(nb) {
		nb = make([]uint64, n, min(max(n, 2*cap(nb)), maxBins))
	} else {
		nb = nb[:n]
	}
	copy(nb[shift:], s.bins)
	clear(nb[:shift])
	s.bins, s.offset = nb, i
}

// foldBelow adds every bin below lo into bin lo and makes lo the first bin.
func (s *sketch) foldBelow(lo int) {
	k := lo - s.offset
	var sum uint64
	for _, c := range s.bins[:min(k, len(s.bins))] {
		sum += c
	}
	if k >= len(s.bins) {
		s.bins = s.bins[:1]
		s.bins[0] = sum
	} else {
		n := copy(s.bins, s.bins[k:])
		s.bins = s.bins[:n]
		s.bins[0] += sum
	}
	s.offset = lo
}

func (s *sketch) count(i int) uint64 {
	j := i - s.offset
	if j < 0 || j >= len(s.bins) {
		return 0
	}
	return s.bins[j]
}

func (s *sketch) reset() { *s = sketch{} } // drop bins: an idle stream holds no memory

// clearKeep empties s but keeps its counters' memory for reuse.
func (s *sketch) clearKeep() { *s = sketch{bins: s.bins[:0]} }

// query returns the q-quantile of the values in both sketches, taking the
// value of nearest rank ceil(q·n). The estimate is clamped to the observed
// minimum and maximum, the first and last ranks are exact, and it is rounded to a whole
// number since the inputs are integers.
func query(a, b *sketch, q float64) float64 {
	n := a.n + b.n
	if n == 0 {
		return 0
	}
	first, last, vmin, vmax := extent(a, b)
	rank := max(uint64(math.Ceil(q*float64(n))), 1)
	switch rank {
	case n: // the bin holding the maximum may report less than it
		return float64(vmax)
	case 1:
		return float64(vmin)
	}
	cum := a.zeros + b.zeros
	v := float64(vmax)
	if cum >= rank {
		v = 0
	} else {
		for i := first; i <= last; i++ {
			if cum += a.count(i) + b.count(i); cum >= rank {
				v = binValue(i)
				break
			}
		}
	}
	return math.Round(min(max(v, float64(vmin)), float64(vmax)))
}

// extent returns the bin range and the value range covered by the non-empty
// sketches among a and b; at least one must be non-empty.
func extent(a, b *sketch) (first, last int, vmin, vmax int64) {
	first, last = math.MaxInt, math.MinInt
	vmin, vmax = math.MaxInt64, math.MinInt64
	for _, s := range [2]*sketch{a, b} {
		if s.n == 0 {
			continue
		}
		vmin, vmax = min(vmin, s.min), max(vmax, s.max)
		if len(s.bins) > 0 {
			first = min(first, s.offset)
			last = max(last, s.offset+len(s.bins)-1)
		}
	}
	return first, last, vmin, vmax
}
