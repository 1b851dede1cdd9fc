package main

import (
	"context"
	"io"
	"testing"
	"time"
)

// A send that goes out late is counted from when it was due, in the
// end-to-end latency and as publish delay: a schedule whose first
// messages were due 200 ms before the phase ran must show latencies of at
// least that, and every message must arrive exactly once.
func TestLatencyCountsFromTheDueTime(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs nsqd")
	}
	const late = 200 * time.Millisecond
	cfg := defaultConfig()
	cfg.stall = 20 * time.Second
	e := &env{cfg: &cfg, scenario: "latency", progress: io.Discard}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := startDaemon(ctx, buildOurNSQD(t)+"/nsqd", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	if err := createChannels(ctx, d, []subscription{{benchTopic, benchChannel}}, 1); err != nil {
		t.Fatal(err)
	}
	rec := newLatencyRecorder(time.Now().Add(-time.Second), 1)
	consumers, err := startLatencyConsumers(d.TCPAddr, 1, 10, rec, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer stopConsumers(consumers)
	producers, err := dialPacedProducers(ctx, d.TCPAddr, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer closePacedProducers(producers)

	p := latencyPhase{rate: 100, start: time.Since(rec.base) - late, measure: late + 300*time.Millisecond}
	samples, sent, err := runLatencyPhase(ctx, e, d, p, producers, rec, 0, "x")
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(50); sent != want {
		t.Errorf("sent %d messages, want %d (100 msg/s for 500 ms)", sent, want)
	}
	got := map[string]float64{}
	for _, s := range samples {
		got[s.metric] = s.value
	}
	lateMs := float64(late/time.Millisecond) * 0.95 // the first sends were due up to 200 ms ago
	for _, metric := range []string{"x: max (ms)", "x: publish delay max (ms)"} {
		if got[metric] < lateMs {
			t.Errorf("%s = %v, want at least %v: late sends not counted from their due time (%v)", metric, got[metric], lateMs, got)
		}
	}
	if got["x: p99 from the write (ms)"] >= got["x: max (ms)"] {
		t.Errorf("latency from the write %v not below the latency from the due time %v", got["x: p99 from the write (ms)"], got["x: max (ms)"])
	}

	// The next phase measures only its own messages.
	p = latencyPhase{rate: 100, start: time.Since(rec.base), measure: 100 * time.Millisecond}
	samples, sent, err = runLatencyPhase(ctx, e, d, p, producers, rec, 50, "y")
	if err != nil {
		t.Fatal(err)
	}
	if sent != 10 {
		t.Errorf("second phase sent %d messages, want 10", sent)
	}
	for _, s := range samples {
		if s.metric == "y: publish delay max (ms)" && s.value >= lateMs {
			t.Errorf("second phase's publish delay %v includes the first phase's late sends", s.value)
		}
	}
}

// The producers' schedules interleave so that together they send evenly.
func TestScheduleInterleaves(t *testing.T) {
	const producers = 4
	p := latencyPhase{rate: 1000, start: time.Second, measure: 10 * time.Millisecond}
	interval := time.Duration(float64(time.Second) * producers / float64(p.rate))
	var dues []time.Duration
	for i := range producers {
		s := schedule{first: p.start + time.Duration(i)*interval/producers, interval: interval, end: p.end()}
		for j := int64(0); s.due(j) < s.end; j++ {
			dues = append(dues, s.due(j))
		}
	}
	if len(dues) != 10 {
		t.Fatalf("%d sends in 10 ms at 1000 msg/s, want 10", len(dues))
	}
	seen := map[time.Duration]bool{}
	for _, d := range dues {
		if (d-p.start)%time.Millisecond != 0 || seen[d] {
			t.Fatalf("sends due at %v: not one per millisecond", dues)
		}
		seen[d] = true
	}
}

func TestRateLabel(t *testing.T) {
	for rate, want := range map[int]string{1000: "1k msg/s", 50000: "50k msg/s", 200: "200 msg/s", 1500: "1500 msg/s"} {
		if got := rateLabel(rate); got != want {
			t.Errorf("rateLabel(%d) = %q, want %q", rate, got, want)
		}
	}
}
