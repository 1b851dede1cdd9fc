package quantile

import (
	"encoding/json"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func values(r *Result) map[float64]float64 {
	m := map[float64]float64{}
	for _, p := range r.Percentiles {
		m[p["quantile"]] = p["value"]
	}
	return m
}

func TestInsertResult(t *testing.T) {
	q := New(10*time.Minute, []float64{0.5, 0.99, 1})
	for v := int64(1); v <= 1000; v++ {
		q.Insert(v, t0)
	}
	r := q.Result(t0)
	if r.Count != 1000 {
		t.Fatalf("Count = %d, want 1000", r.Count)
	}
	got := values(r)
	for quant, want := range map[float64]int64{0.5: 500, 0.99: 990} {
		if !within(got[quant], want, relAccuracy) {
			t.Errorf("p%v = %v, want %d ±2%%", quant, got[quant], want)
		}
	}
	if got[1] != 1000 {
		t.Errorf("p1 = %v, want 1000", got[1])
	}
	// Order of percentiles is the configured order.
	if r.Percentiles[0]["quantile"] != 0.5 || r.Percentiles[2]["quantile"] != 1 {
		t.Errorf("percentile order %v", r.Percentiles)
	}
}

func TestWindow(t *testing.T) {
	q := New(10*time.Minute, []float64{1})
	count := func(at time.Duration) (int, float64) {
		r := q.Result(t0.Add(at))
		return r.Count, r.Percentiles[0]["value"]
	}
	q.Insert(100, t0)
	q.Insert(200, t0.Add(4*time.Minute))
	if n, v := count(4 * time.Minute); n != 2 || v != 200 {
		t.Fatalf("at 4m: count %d max %v, want 2, 200", n, v)
	}
	q.Insert(50, t0.Add(6*time.Minute)) // second half begins; first half kept
	if n, v := count(6 * time.Minute); n != 3 || v != 200 {
		t.Fatalf("at 6m: count %d max %v, want 3, 200", n, v)
	}
	// At 10m the first half (0-5m) is dropped.
	if n, v := count(10 * time.Minute); n != 1 || v != 50 {
		t.Fatalf("at 10m: count %d max %v, want 1, 50", n, v)
	}
	// A clock step backwards drops nothing.
	if n, _ := count(time.Minute); n != 1 {
		t.Fatalf("clock backwards: count %d, want 1", n)
	}
	// Long idle: everything expires in one step, and the window restarts.
	if n, v := count(3 * time.Hour); n != 0 || v != 0 {
		t.Fatalf("at 3h: count %d value %v, want 0, 0", n, v)
	}
	q.Insert(7, t0.Add(3*time.Hour+time.Minute))
	if n, v := count(3*time.Hour + 4*time.Minute); n != 1 || v != 7 {
		t.Fatalf("after idle: count %d value %v, want 1, 7", n, v)
	}
	if n, _ := count(3*time.Hour + 10*time.Minute); n != 0 {
		t.Fatalf("after idle window: count %d, want 0", n)
	}
}

func TestDisabled(t *testing.T) {
	q := New(time.Minute, nil)
	if q != nil {
		t.Fatal("New with no percentiles should return nil")
	}
	q.Insert(1, t0) // must not panic
	b, err := json.Marshal(q.Result(t0))
	if err != nil || string(b) != `{"count":0,"percentiles":null}` {
		t.Fatalf("disabled result %s %v", b, err)
	}
}

func TestEmptyResultJSON(t *testing.T) {
	b, _ := json.Marshal(New(time.Minute, []float64{0.99}).Result(t0))
	if string(b) != `{"count":0,"percentiles":[{"quantile":0.99,"value":0}]}` {
		t.Fatalf("empty result %s", b)
	}
}

func TestNewPanics(t *testing.T) {
	for _, tc := range []struct {
		w time.Duration
		p []float64
	}{{0, []float64{0.5}}, {time.Minute, []float64{0}}, {time.Minute, []float64{1.5}}, {time.Minute, []float64{-1}}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%v, %v) did not panic", tc.w, tc.p)
				}
			}()
			New(tc.w, tc.p)
		}()
	}
}

func TestConcurrentInsert(t *testing.T) {
	q := New(time.Minute, []float64{0.5})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				q.Insert(int64(g*1000+i), t0.Add(time.Duration(i)*time.Millisecond))
				if i%100 == 0 {
					q.Result(t0)
				}
			}
		})
	}
	wg.Wait()
	if r := q.Result(t0.Add(time.Second)); r.Count != 8000 {
		t.Fatalf("Count = %d, want 8000", r.Count)
	}
}

func TestMerge(t *testing.T) {
	a := &Result{Count: 1, Percentiles: []map[string]float64{{"quantile": 0.99, "value": 100}, {"quantile": 0.5, "value": 10}}}
	b := &Result{Count: 3, Percentiles: []map[string]float64{{"quantile": 0.5, "value": 30}, {"quantile": 0.99, "value": 300}}}
	idle := &Result{Count: 0, Percentiles: []map[string]float64{{"quantile": 0.99, "value": 0}, {"quantile": 0.5, "value": 0}}}
	r := Merge(a, nil, idle, b, &Result{})
	if r.Count != 4 {
		t.Fatalf("Count = %d, want 4", r.Count)
	}
	got := values(r)
	// (1·100 + 3·300) / 4 = 250; (1·10 + 3·30) / 4 = 25; idle has no weight.
	if got[0.99] != 250 || got[0.5] != 25 || len(got) != 2 {
		t.Fatalf("merged %v", r.Percentiles)
	}
	if r.Percentiles[0]["quantile"] != 0.99 {
		t.Errorf("order %v, want first-seen order", r.Percentiles)
	}
	// Merging must not modify the inputs.
	if a.Percentiles[0]["value"] != 100 {
		t.Errorf("input modified: %v", a.Percentiles)
	}

	if r := Merge(); r.Count != 0 || r.Percentiles != nil {
		t.Errorf("Merge() = %+v, want disabled", r)
	}
	r = Merge(idle)
	if r.Count != 0 || len(r.Percentiles) != 2 || r.Percentiles[0]["value"] != 0 {
		t.Errorf("Merge(idle) = %+v", r)
	}
}

func TestMergeQuantiles(t *testing.T) {
	// Two channels with the same distribution merge to the same values.
	x, y := New(time.Minute, []float64{0.5, 0.99}), New(time.Minute, []float64{0.5, 0.99})
	for v := int64(1); v <= 1000; v++ {
		x.Insert(v, t0)
		y.Insert(v, t0)
	}
	rx := x.Result(t0)
	r := Merge(rx, y.Result(t0))
	if r.Count != 2000 || values(r)[0.5] != values(rx)[0.5] || values(r)[0.99] != values(rx)[0.99] {
		t.Fatalf("merged %+v, single %+v", r, rx)
	}
}

func BenchmarkInsert(b *testing.B) {
	q := New(10*time.Minute, []float64{0.5, 0.99})
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		q.Insert(int64(1000+i%1000000), now)
	}
}
