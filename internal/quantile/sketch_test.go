package quantile

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// exact returns the nearest-rank q-quantile of sorted values.
func exact(sorted []int64, q float64) int64 {
	r := max(int(math.Ceil(q*float64(len(sorted)))), 1)
	return sorted[r-1]
}

func within(got float64, want int64, rel float64) bool {
	return math.Abs(got-float64(want)) <= rel*float64(want)+0.5 // +0.5: rounding
}

func TestSketchAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var a, b sketch
	var all []int64
	for i := range 100000 {
		// Log-uniform latencies from 10 µs to 10 s, as ns.
		v := int64(math.Exp(math.Log(1e4) + rng.Float64()*math.Log(1e6)))
		all = append(all, v)
		if i%3 == 0 {
			a.add(v)
		} else {
			b.add(v)
		}
	}
	slices.Sort(all)
	for _, q := range []float64{0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1} {
		got, want := query(&a, &b, q), exact(all, q)
		if !within(got, want, relAccuracy) {
			t.Errorf("q%v = %v, want %d ±%v%%", q, got, want, relAccuracy*100)
		}
	}
	if got := query(&a, &b, 1); got != float64(all[len(all)-1]) {
		t.Errorf("q1 = %v, want exact max %d", got, all[len(all)-1])
	}
	if len(a.bins) > maxBins || cap(a.bins) > maxBins {
		t.Errorf("bins len %d cap %d > %d", len(a.bins), cap(a.bins), maxBins)
	}
}

func TestSketchBounded(t *testing.T) {
	// Values spanning all of int64 must fold the lowest bins, not grow.
	var s sketch
	var top int64 // largest power of 3 inserted
	for v := int64(1); v > 0 && v < math.MaxInt64/3; v *= 3 {
		s.add(v)
		top = v
	}
	s.add(math.MaxInt64)
	for v := int64(1); v < 1000; v++ { // and below the kept range again
		s.add(v)
	}
	if len(s.bins) > maxBins || cap(s.bins) > maxBins {
		t.Fatalf("bins len %d cap %d > %d", len(s.bins), cap(s.bins), maxBins)
	}
	var total uint64
	for _, c := range s.bins {
		total += c
	}
	if total+s.zeros != s.n {
		t.Fatalf("bins hold %d values, n = %d", total+s.zeros, s.n)
	}
	var empty sketch
	if got := query(&s, &empty, 1); got != math.MaxInt64 {
		t.Errorf("max = %v", got)
	}
	// The top of the range keeps full accuracy: rank n-1 is top.
	q := (float64(s.n) - 1.5) / float64(s.n)
	if got := query(&s, &empty, q); !within(got, top, relAccuracy) {
		t.Errorf("second largest = %v, want ~%d", got, top)
	}
	if got := query(&s, &empty, 0); got != 1 {
		t.Errorf("min = %v, want 1", got)
	}
}

func TestSketchGrowDown(t *testing.T) {
	// Insert in descending order so every value extends the range downwards.
	var s, empty sketch
	for v := int64(1000); v >= 1; v-- {
		s.add(v)
	}
	for _, q := range []float64{0.1, 0.5, 0.99} {
		if got, want := query(&s, &empty, q), int64(q*1000); !within(got, want, relAccuracy) {
			t.Errorf("q%v = %v, want ~%d", q, got, want)
		}
	}
}

func TestSketchZerosAndNegatives(t *testing.T) {
	var s, empty sketch
	for _, v := range []int64{-5, 0, 0, 10, 20} {
		s.add(v)
	}
	if got := query(&s, &empty, 0.6); got != 0 {
		t.Errorf("q0.6 = %v, want 0 (negatives count as 0)", got)
	}
	if got := query(&s, &empty, 1); got != 20 {
		t.Errorf("q1 = %v, want 20", got)
	}
	var zeros sketch
	zeros.add(0)
	if got := query(&zeros, &empty, 0.5); got != 0 {
		t.Errorf("all zeros: q0.5 = %v", got)
	}
}
