package nsqd

import (
	"encoding/json"
	"math"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"
	dto "github.com/prometheus/client_model/go"

	"github.com/nsqgo/nsq/internal/testutil"
)

// latencyLog records, client side, the publish-to-FIN latency of each
// message a consumer finishes.
type latencyLog struct {
	mu sync.Mutex
	ns []int64
}

func (l *latencyLog) add(v int64) {
	l.mu.Lock()
	l.ns = append(l.ns, v)
	l.mu.Unlock()
}

func (l *latencyLog) sorted() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]int64(nil), l.ns...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// nearestRank is the q-quantile of sorted by the nearest-rank rule the
// sketch uses.
func nearestRank(sorted []int64, q float64) float64 {
	r := max(int(math.Ceil(q*float64(len(sorted)))), 1)
	return float64(sorted[r-1])
}

// TestE2ELatency holds every message a known time before FIN on two
// channels (100 ms and 400 ms) and checks the percentiles /stats reports,
// per channel and merged per topic, against the latencies the consumers
// measured: within the sketch's 2% plus the FIN's trip to the server.
func TestE2ELatency(t *testing.T) {
	o := testOptions(t)
	o.E2EProcessingLatencyPercentiles = []float64{1.0, 0.99, 0.5, 0.25}
	d := startDaemon(t, o)
	const topic, n = "e2e", 20
	holds := map[string]time.Duration{"fast": 100 * time.Millisecond, "slow": 400 * time.Millisecond}
	logs := map[string]*latencyLog{}
	for ch, hold := range holds {
		l := &latencyLog{}
		logs[ch] = l
		queueConsumer(t, d, topic, ch, n, 0, func(m *nsq.Message) {
			time.AfterFunc(hold, func() {
				l.add(time.Now().UnixNano() - m.Timestamp)
				m.Finish()
			})
		})
	}
	p := newProducer(t, d.tcp)
	for _, b := range bodies("e2e", n) {
		if err := p.Publish(topic, b); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, "all FINs counted", 10*time.Second, func() bool {
		return channelStatsOf(d, topic, "fast").E2eProcessingLatency.Count == n &&
			channelStatsOf(d, topic, "slow").E2eProcessingLatency.Count == n
	})

	code, body := d.do("GET", "/stats?format=json", "")
	if code != 200 {
		t.Fatalf("/stats: %d %s", code, body)
	}
	var st struct {
		Topics []struct {
			TopicName string  `json:"topic_name"`
			E2E       e2eJSON `json:"e2e_processing_latency"`
			Channels  []struct {
				ChannelName string  `json:"channel_name"`
				E2E         e2eJSON `json:"e2e_processing_latency"`
			} `json:"channels"`
		} `json:"topics"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Topics) != 1 || len(st.Topics[0].Channels) != 2 {
		t.Fatalf("stats %s", body)
	}
	// The FIN leaves the consumer after it measured; allow for the trip.
	const transit = 75 * time.Millisecond
	checkAgainst := func(what string, got e2eJSON, sorted []int64) {
		t.Helper()
		if got.Count != len(sorted) {
			t.Errorf("%s count %d, want %d", what, got.Count, len(sorted))
		}
		if len(got.Percentiles) != len(o.E2EProcessingLatencyPercentiles) {
			t.Fatalf("%s percentiles %v", what, got.Percentiles)
		}
		for i, p := range got.Percentiles {
			q := o.E2EProcessingLatencyPercentiles[i]
			if p.Quantile != q {
				t.Errorf("%s percentile %d is %v, want %v (configured order)", what, i, p.Quantile, q)
			}
			want := nearestRank(sorted, q)
			if lo, hi := want*0.98, want*1.02+float64(transit); p.Value < lo || p.Value > hi {
				t.Errorf("%s p%v = %v, want %v (range %.0f..%.0f)", what, q, time.Duration(p.Value), time.Duration(want), lo, hi)
			}
		}
	}
	for _, ch := range st.Topics[0].Channels {
		sorted := logs[ch.ChannelName].sorted()
		checkAgainst(ch.ChannelName, ch.E2E, sorted)
		if lo := float64(holds[ch.ChannelName]); ch.E2E.Percentiles[3].Value < lo {
			t.Errorf("%s p25 %v below the hold time", ch.ChannelName, time.Duration(ch.E2E.Percentiles[3].Value))
		}
	}
	// The topic merges its channels' sketches: its p99 is the slow channel's
	// and its p25 the fast one's, which no average of the two would give.
	all := append(logs["fast"].sorted(), logs["slow"].sorted()...)
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	checkAgainst("topic", st.Topics[0].E2E, all)

	// /metrics reports the same windows, in seconds.
	fams := scrapeMetrics(t, d)
	s := findMetric(t, fams, "nsq_topic_e2e_processing_latency_seconds", dto.MetricType_SUMMARY, "topic", topic).Summary
	if s.GetSampleCount() != 2*n {
		t.Errorf("summary count %d, want %d", s.GetSampleCount(), 2*n)
	}
	var sum float64
	for _, v := range all {
		sum += float64(v)
	}
	if got := s.GetSampleSum(); math.Abs(got-sum/1e9) > 2*n*transit.Seconds() {
		t.Errorf("summary sum %vs, want about %vs", got, sum/1e9)
	}
	for _, q := range s.Quantile {
		want := nearestRank(all, q.GetQuantile()) / 1e9
		if v := q.GetValue(); v < want*0.98 || v > want*1.02+transit.Seconds() {
			t.Errorf("summary q%v = %vs, want about %vs", q.GetQuantile(), v, want)
		}
	}
}

type e2eJSON struct {
	Count       int `json:"count"`
	Percentiles []struct {
		Quantile float64 `json:"quantile"`
		Value    float64 `json:"value"`
	} `json:"percentiles"`
}

// TestE2EDisabledShape checks NSQ's shape when no percentile is set.
func TestE2EDisabledShape(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	tp, err := d.GetTopic("plain")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.GetChannel("c"); err != nil {
		t.Fatal(err)
	}
	_, body := d.do("GET", "/stats?format=json", "")
	var st struct {
		Topics []struct {
			E2E      json.RawMessage `json:"e2e_processing_latency"`
			Channels []struct {
				E2E json.RawMessage `json:"e2e_processing_latency"`
			} `json:"channels"`
		} `json:"topics"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	const disabled = `{"count":0,"percentiles":null}`
	if string(st.Topics[0].E2E) != disabled || string(st.Topics[0].Channels[0].E2E) != disabled {
		t.Fatalf("disabled e2e: topic %s channel %s", st.Topics[0].E2E, st.Topics[0].Channels[0].E2E)
	}
}
