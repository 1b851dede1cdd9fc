package quantile

import (
	"math"
	"testing"
	"time"
)

func TestMergeExactUnion(t *testing.T) {
	// One fast and one slow channel: the union's p99 is the slow one's
	// latency, which no average of the two channels' p99 gives.
	pcts := []float64{0.99, 0.5}
	fast, slow := New(time.Minute, pcts), New(time.Minute, pcts)
	for range 100 {
		fast.Insert(1_000, t0)
	}
	for range 10 {
		slow.Insert(1_000_000, t0)
	}
	r := Merge(fast.Result(t0), slow.Result(t0), nil, &Result{})
	if r.Count != 110 {
		t.Fatalf("Count = %d, want 110", r.Count)
	}
	got := values(r)
	if !within(got[0.99], 1_000_000, relAccuracy) {
		t.Errorf("union p99 = %v, want 1e6 ±2%%", got[0.99])
	}
	if !within(got[0.5], 1_000, relAccuracy) {
		t.Errorf("union p50 = %v, want 1e3 ±2%%", got[0.5])
	}
	if r.Percentiles[0]["quantile"] != 0.99 || len(r.Percentiles) != 2 {
		t.Errorf("percentiles %v", r.Percentiles)
	}
	// An idle channel adds nothing.
	idle := New(time.Minute, pcts)
	if r := Merge(idle.Result(t0), fast.Result(t0)); r.Count != 100 || values(r)[0.99] != 1000 {
		t.Errorf("with idle: %+v", r)
	}
	if r := Merge(idle.Result(t0)); r.Count != 0 || len(r.Percentiles) != 2 || values(r)[0.99] != 0 {
		t.Errorf("idle only: %+v", r)
	}
}

func TestUnionTotalsAndReuse(t *testing.T) {
	a, b := New(time.Minute, []float64{1}), New(time.Minute, []float64{1})
	a.Insert(10, t0)
	a.Insert(30, t0)
	b.Insert(2000, t0)
	var u Union
	u.Add(a, t0)
	u.Add(b, t0)
	u.Add(nil, t0)
	if n, s := u.Totals(); n != 3 || s != 2040 || u.Count() != 3 || u.Value(1) != 2000 {
		t.Fatalf("totals %d %v count %d max %v", n, s, u.Count(), u.Value(1))
	}
	u.Reset()
	if u.Count() != 0 || u.Value(0.5) != 0 {
		t.Fatalf("after reset count %d", u.Count())
	}
	u.Add(a, t0)
	if u.Count() != 2 || u.Value(1) != 30 || u.Value(0.5) != 10 {
		t.Fatalf("reused: count %d max %v p50 %v", u.Count(), u.Value(1), u.Value(0.5))
	}
	// Totals outlive the window; the window does not.
	later := t0.Add(5 * time.Minute)
	if n, s := a.Totals(); n != 2 || s != 40 {
		t.Fatalf("a totals %d %v", n, s)
	}
	if r := a.Result(later); r.Count != 0 {
		t.Fatalf("window count %d after it passed", r.Count)
	}
	if n, _ := a.Totals(); n != 2 {
		t.Fatalf("totals dropped with the window: %d", n)
	}
}

func TestSketchMergeMatchesInserts(t *testing.T) {
	// Merging sketches equals inserting every value into one sketch, also
	// when the union spans more than maxBins and folds.
	var x, y, all sketch
	for v := int64(1); v < 1<<40; v = v*3/2 + 1 {
		if v%2 == 0 {
			x.add(v)
		} else {
			y.add(v)
		}
		all.add(v)
	}
	var u sketch
	u.merge(&x)
	u.merge(&y)
	if u.n != all.n || u.min != all.min || u.max != all.max {
		t.Fatalf("n/min/max %d/%d/%d vs %d/%d/%d", u.n, u.min, u.max, all.n, all.min, all.max)
	}
	for _, p := range []float64{0.1, 0.5, 0.9, 0.99} {
		a, b := query(&u, &sketch{}, p), query(&all, &sketch{}, p)
		if math.Abs(a-b) > b*2*relAccuracy {
			t.Errorf("p%v merged %v, inserted %v", p, a, b)
		}
	}
	if len(u.bins) > maxBins {
		t.Fatalf("merged sketch has %d bins", len(u.bins))
	}
}
