package admin

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/quantile"
)

func topicSample(name string, messages, depth int64, channels ...string) *TopicStats {
	t := &TopicStats{TopicName: name, MessageCount: messages, Depth: depth}
	for _, c := range channels {
		t.Channels = append(t.Channels, &ChannelStats{TopicName: name, ChannelName: c, MessageCount: messages, Depth: depth, InFlightCount: 2})
	}
	return t
}

// TestHistoryRingKeepsTheLastSamples: the ring keeps capacity samples,
// oldest first, rates come from message-count deltas, and series of topics
// that disappear are forgotten.
func TestHistoryRingKeepsTheLastSamples(t *testing.T) {
	h := newHistory(4)
	start := time.Unix(1000, 0)
	for i := range 6 {
		h.record(start.Add(time.Duration(i)*10*time.Second), []*TopicStats{topicSample("t", int64(100*i), int64(i), "c")})
	}
	ss := h.samples("t", "")
	if len(ss) != 4 || ss[0].messages != 200 || ss[3].messages != 500 {
		t.Fatalf("samples = %+v, want the last 4 (messages 200..500)", ss)
	}
	gs := h.graphs("t", "c")
	if len(gs) != 3 {
		t.Fatalf("%d graphs, want rate, depth and in flight", len(gs))
	}
	if gs[0].Last != "10" { // 100 messages per 10 s
		t.Errorf("rate = %s, want 10", gs[0].Last)
	}
	if gs[1].Last != "5" || gs[2].Last != "2" {
		t.Errorf("depth %s in flight %s, want 5 and 2", gs[1].Last, gs[2].Last)
	}
	if !strings.Contains(string(gs[0].SVG), `aria-label="Message rate (msgs/s) over the last 30s: now 10, peak 10"`) {
		t.Errorf("rate graph has no accessible label: %s", gs[0].SVG)
	}
	h.record(start.Add(time.Minute), []*TopicStats{topicSample("other", 1, 1)})
	if h.samples("t", "") != nil || h.samples("t", "c") != nil {
		t.Errorf("series of a deleted topic are kept")
	}
}

// TestHistoryCounterReset: a node restart lowers message_count; the rate
// shows 0, not a negative spike.
func TestHistoryCounterReset(t *testing.T) {
	h := newHistory(10)
	at := time.Unix(0, 0)
	for i, m := range []int64{500, 600, 10} {
		h.record(at.Add(time.Duration(i)*time.Second), []*TopicStats{topicSample("t", m, 0)})
	}
	if g := h.graphs("t", ""); g[0].Last != "0" || !strings.Contains(string(g[0].SVG), "peak 100") {
		t.Errorf("rate after a reset = %s (%s)", g[0].Last, g[0].SVG)
	}
}

func TestHistorySampleCap(t *testing.T) {
	h := newHistory(1 << 30)
	if h.capacity != maxSamples {
		t.Errorf("capacity %d, want the cap %d", h.capacity, maxSamples)
	}
	h.record(time.Now(), []*TopicStats{topicSample("t", 1, 1)})
	if got := cap(h.series["t"].buf); got > 16 {
		t.Errorf("a series with one sample holds room for %d", got)
	}
}

func TestHistorySeriesCap(t *testing.T) {
	h := newHistory(2)
	var topics []*TopicStats
	for i := range maxSeries + 10 {
		topics = append(topics, topicSample(fmt.Sprintf("t%d", i), 1, 1))
	}
	h.record(time.Now(), topics)
	if len(h.series) != maxSeries {
		t.Errorf("%d series kept, want the cap %d", len(h.series), maxSeries)
	}
}

// TestLatencyAggregate merges two nodes' percentiles: min, max and the
// count-weighted average per quantile.
func TestLatencyAggregate(t *testing.T) {
	node := func(doc string) *LatencyAggregate {
		var r quantile.Result
		if err := json.Unmarshal([]byte(doc), &r); err != nil {
			t.Fatal(err)
		}
		return latencyFromDoc(&r)
	}
	a := node(`{"count":1,"percentiles":[{"quantile":0.99,"value":100}]}`)
	b := node(`{"count":3,"percentiles":[{"quantile":0.99,"value":200},{"quantile":0.5,"value":50}]}`)
	total := &LatencyAggregate{}
	total.add(a)
	total.add(b)
	total.add(nil)
	if total.Count != 4 || total.Addr != "*" || len(total.Percentiles) != 2 {
		t.Fatalf("aggregate = %+v", total)
	}
	p99 := total.Percentiles[0]
	if p99["quantile"] != 0.99 || p99["min"] != 100 || p99["max"] != 200 || p99["average"] != 175 || p99["count"] != 4 {
		t.Errorf("p99 = %v, want min 100 max 200 average 175 count 4", p99)
	}
}

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"1.3.0", "1.2.1", 1}, {"1.2.1", "1.3.0", -1}, {"1.3.0-compat.1", "1.3.0", 0}, {"garbage", "0.0.0", 0}, {"1.10.0", "1.9.9", 1}} {
		if got := compareVersions(tc.a, tc.b); got != tc.want {
			t.Errorf("compareVersions(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	ps := []*Producer{{Version: "1.3.0"}, {Version: "1.2.1"}}
	markOutOfDate(ps)
	if ps[0].OutOfDate || !ps[1].OutOfDate {
		t.Errorf("out_of_date = %v %v, want false true", ps[0].OutOfDate, ps[1].OutOfDate)
	}
}
