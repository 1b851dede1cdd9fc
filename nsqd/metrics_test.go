package nsqd

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nsqgo/nsq/internal/testutil"
)

// scrapeMetrics GETs /metrics and parses it with the Prometheus text parser.
func scrapeMetrics(t *testing.T, d *testDaemon) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(d.url("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("/metrics: %d %s", resp.StatusCode, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// findMetric returns the sample of family name whose labels are exactly
// labels (name=value pairs), failing the test if the family has the wrong
// type or no such sample.
func findMetric(t *testing.T, fams map[string]*dto.MetricFamily, name string, typ dto.MetricType, labels ...string) *dto.Metric {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("no metric family %s", name)
	}
	if f.GetType() != typ {
		t.Fatalf("%s is %v, want %v", name, f.GetType(), typ)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
next:
	for _, m := range f.Metric {
		if len(m.Label) != len(want) {
			continue
		}
		for _, lp := range m.Label {
			if want[lp.GetName()] != lp.GetValue() {
				continue next
			}
		}
		return m
	}
	t.Fatalf("%s%v not found", name, labels)
	return nil
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return -1
}

// queueConsumer subscribes topic/channel with go-nsq; handle decides what
// to do with each delivery (it must Finish or Requeue it, or not).
func queueConsumer(t *testing.T, d *testDaemon, topic, channel string, maxInFlight int, msgTimeout time.Duration, handle func(*nsq.Message)) {
	t.Helper()
	cfg := nsqConfig()
	cfg.MaxInFlight = maxInFlight
	if msgTimeout > 0 {
		cfg.MsgTimeout = msgTimeout
	}
	newConsumer(t, d.tcp, topic, channel, cfg, nsq.HandlerFunc(func(m *nsq.Message) error {
		m.DisableAutoResponse()
		handle(m)
		return nil
	}))
	testutil.WaitFor(t, channel+" subscribed", 5*time.Second, func() bool {
		for _, ts := range d.Stats(topic, channel, false) {
			for _, cs := range ts.Channels {
				if cs.ChannelName == channel && cs.ClientCount == 1 {
					return true
				}
			}
		}
		return false
	})
}

func channelStatsOf(d *testDaemon, topic, channel string) ChannelStats {
	for _, ts := range d.Stats(topic, channel, false) {
		for _, cs := range ts.Channels {
			if cs.ChannelName == channel {
				return cs
			}
		}
	}
	return ChannelStats{}
}

func TestMetricsAfterTraffic(t *testing.T) {
	o := testOptions(t)
	o.E2EProcessingLatencyPercentiles = []float64{0.99, 0.5}
	d := startDaemon(t, o)
	const topic, n = "metrics", 10
	if code, body := d.do("POST", "/topic/create?topic="+topic, ""); code != 200 {
		t.Fatalf("topic/create: %d %s", code, body)
	}
	if code, body := d.do("POST", "/channel/create?topic="+topic+"&channel=idle", ""); code != 200 {
		t.Fatalf("channel/create: %d %s", code, body)
	}
	// fin finishes everything; req requeues each first attempt; slow lets
	// each first attempt time out; hold keeps everything in flight.
	queueConsumer(t, d, topic, "fin", n, 0, func(m *nsq.Message) { m.Finish() })
	queueConsumer(t, d, topic, "req", n, 0, func(m *nsq.Message) {
		if m.Attempts == 1 {
			m.RequeueWithoutBackoff(0)
			return
		}
		m.Finish()
	})
	// Messages left unanswered are answered at the end, or go-nsq waits
	// for them when it stops.
	var heldMu sync.Mutex
	var held []*nsq.Message
	hold := func(m *nsq.Message) {
		heldMu.Lock()
		held = append(held, m)
		heldMu.Unlock()
	}
	queueConsumer(t, d, topic, "slow", n, time.Second, func(m *nsq.Message) {
		if m.Attempts > 1 {
			m.Finish()
			return
		}
		hold(m)
	})
	queueConsumer(t, d, topic, "hold", n, 0, hold)
	t.Cleanup(func() {
		heldMu.Lock()
		defer heldMu.Unlock()
		for _, m := range held {
			m.Finish()
		}
	})

	p := newProducer(t, d.tcp)
	msgs := bodies("metric-body", n)
	var bodyBytes int
	for _, b := range msgs {
		bodyBytes += len(b)
	}
	if err := p.MultiPublish(topic, msgs); err != nil {
		t.Fatal(err)
	}
	// A deferred message on a second topic.
	if err := p.DeferredPublish("deferred", time.Hour, []byte("later")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.GetExistingTopic("deferred"); !err {
		t.Fatal("topic deferred missing")
	}
	dt, _ := d.GetExistingTopic("deferred")
	if _, err := dt.GetChannel("d"); err != nil {
		t.Fatal(err)
	}
	if err := p.DeferredPublish("deferred", time.Hour, []byte("later2")); err != nil {
		t.Fatal(err)
	}

	settled := func(ch string, requeues, timeouts uint64) func() bool {
		return func() bool {
			cs := channelStatsOf(d, topic, ch)
			return cs.InFlightCount == 0 && cs.Depth == 0 && cs.RequeueCount == requeues && cs.TimeoutCount == timeouts &&
				cs.E2eProcessingLatency.Count == n
		}
	}
	testutil.WaitFor(t, "fin settled", 10*time.Second, settled("fin", 0, 0))
	testutil.WaitFor(t, "req settled", 10*time.Second, settled("req", n, 0))
	testutil.WaitFor(t, "slow settled", 10*time.Second, settled("slow", 0, n))
	testutil.WaitFor(t, "hold in flight", 10*time.Second, func() bool { return channelStatsOf(d, topic, "hold").InFlightCount == n })

	fams := scrapeMetrics(t, d)
	gauge, counter, summary := dto.MetricType_GAUGE, dto.MetricType_COUNTER, dto.MetricType_SUMMARY
	check := func(name string, typ dto.MetricType, want float64, labels ...string) {
		t.Helper()
		if got := metricValue(findMetric(t, fams, name, typ, labels...)); got != want {
			t.Errorf("%s%v = %v, want %v", name, labels, got, want)
		}
	}
	check("nsq_topic_messages_total", counter, n, "topic", topic)
	check("nsq_topic_message_bytes_total", counter, float64(bodyBytes), "topic", topic)
	check("nsq_topic_depth", gauge, 0, "topic", topic)
	check("nsq_topic_backend_depth", gauge, 0, "topic", topic)
	check("nsq_topic_paused", gauge, 0, "topic", topic)
	check("nsq_topic_channels", gauge, 5, "topic", topic)
	check("nsq_topic_messages_total", counter, 2, "topic", "deferred")
	check("nsq_topic_depth", gauge, 0, "topic", "deferred")

	for _, c := range []struct {
		name                                    string
		depth, inFlight, requeues, timeouts, cl float64
	}{
		{"fin", 0, 0, 0, 0, 1},
		{"req", 0, 0, n, 0, 1},
		{"slow", 0, 0, 0, n, 1},
		{"hold", 0, n, 0, 0, 1},
		{"idle", n, 0, 0, 0, 0},
	} {
		l := []string{"topic", topic, "channel", c.name}
		check("nsq_channel_depth", gauge, c.depth, l...)
		check("nsq_channel_backend_depth", gauge, 0, l...)
		check("nsq_channel_in_flight_messages", gauge, c.inFlight, l...)
		check("nsq_channel_deferred_messages", gauge, 0, l...)
		check("nsq_channel_messages_total", counter, n, l...)
		check("nsq_channel_requeues_total", counter, c.requeues, l...)
		check("nsq_channel_timeouts_total", counter, c.timeouts, l...)
		check("nsq_channel_clients", gauge, c.cl, l...)
		check("nsq_channel_paused", gauge, 0, l...)
	}
	// The DPUB made before channel d existed reached it with its delay.
	check("nsq_channel_deferred_messages", gauge, 2, "topic", "deferred", "channel", "d")

	// E2E: FINs are counted per channel and merged per topic.
	for ch, count := range map[string]uint64{"fin": n, "req": n, "slow": n, "hold": 0, "idle": 0} {
		s := findMetric(t, fams, "nsq_channel_e2e_processing_latency_seconds", summary, "topic", topic, "channel", ch).Summary
		if s.GetSampleCount() != count {
			t.Errorf("e2e count %s = %d, want %d", ch, s.GetSampleCount(), count)
		}
		if len(s.Quantile) != 2 {
			t.Errorf("e2e %s quantiles %v", ch, s.Quantile)
		}
	}
	ts := findMetric(t, fams, "nsq_topic_e2e_processing_latency_seconds", summary, "topic", topic).Summary
	if ts.GetSampleCount() != 3*n || ts.GetSampleSum() <= 0 {
		t.Errorf("topic e2e count %d sum %v, want %d and > 0", ts.GetSampleCount(), ts.GetSampleSum(), 3*n)
	}
	// slow's messages waited out a 1 s timeout, so the topic's p99 is over
	// a second while fin's is far below.
	for _, q := range ts.Quantile {
		if q.GetQuantile() == 0.99 && q.GetValue() < 1 {
			t.Errorf("topic e2e p99 = %vs, want >= 1s (slow channel)", q.GetValue())
		}
	}

	// Daemon-wide: 1 producer + 4 consumers.
	check("nsq_nsqd_connections", gauge, 5)
	check("nsq_nsqd_topics", gauge, 2)
	check("nsq_nsqd_channels", gauge, 6)
	check("nsq_nsqd_healthy", gauge, 1)
	check("nsq_nsqd_disk_bad_segments_total", counter, 0)
	check("nsq_nsqd_disk_queues_failing", gauge, 0)
	if v := metricValue(findMetric(t, fams, "nsq_nsqd_connections_total", counter)); v < 5 {
		t.Errorf("connections_total %v, want >= 5", v)
	}
	findMetric(t, fams, "nsq_nsqd_info", gauge, "version", versionString())
	// Memory state and limits, from the memory guard.
	check("nsq_nsqd_memory_state", gauge, 0)
	hard := fams["nsq_nsqd_memory_hard_limit_bytes"]
	if hard == nil || len(hard.Metric) != 1 || hard.Metric[0].Label[0].GetValue() == "" {
		t.Fatalf("nsq_nsqd_memory_hard_limit_bytes %v", hard)
	}
	soft := metricValue(findMetric(t, fams, "nsq_nsqd_memory_soft_limit_bytes", gauge))
	if h := metricValue(hard.Metric[0]); soft <= 0 || soft > h {
		t.Errorf("soft limit %v, hard limit %v", soft, h)
	}
	for _, name := range []string{"nsq_nsqd_memory_usage_bytes", "nsq_nsqd_memory_queue_bytes", "nsq_nsqd_memory_queue_limit_bytes",
		"nsq_nsqd_deferred_memory_bytes", "nsq_nsqd_deferred_memory_limit_bytes"} {
		findMetric(t, fams, name, gauge)
	}
	if v := metricValue(findMetric(t, fams, "nsq_nsqd_memory_queue_bytes", gauge)); v <= 0 {
		t.Errorf("memory queue bytes %v with channel idle holding %d messages", v, n)
	}
	findMetric(t, fams, "go_goroutines", gauge)
	if _, ok := fams["process_cpu_seconds_total"]; !ok && isLinux() {
		t.Error("no process collector metrics")
	}
	for name := range fams {
		if !strings.HasPrefix(name, "nsq_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			t.Errorf("unexpected family %s", name)
		}
	}

	// Pausing shows at once, and deleted queues vanish.
	d.do("POST", "/channel/pause?topic="+topic+"&channel=idle", "")
	d.do("POST", "/topic/delete?topic=deferred", "")
	fams = scrapeMetrics(t, d)
	check("nsq_channel_paused", gauge, 1, "topic", topic, "channel", "idle")
	for _, m := range fams["nsq_topic_depth"].Metric {
		if m.Label[0].GetValue() == "deferred" {
			t.Error("deleted topic still exported")
		}
	}
}

func TestMetricsWithoutE2E(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	p := newProducer(t, d.tcp)
	if err := p.Publish("plain", []byte("x")); err != nil {
		t.Fatal(err)
	}
	fams := scrapeMetrics(t, d)
	if _, ok := fams["nsq_topic_e2e_processing_latency_seconds"]; ok {
		t.Error("E2E summary exported with no percentile configured")
	}
	if v := metricValue(findMetric(t, fams, "nsq_topic_depth", dto.MetricType_GAUGE, "topic", "plain")); v != 1 {
		t.Errorf("depth %v, want 1", v)
	}
}

// TestMetricsConcurrentScrapes runs scrapes against topic churn under -race.
func TestMetricsConcurrentScrapes(t *testing.T) {
	o := testOptions(t)
	o.E2EProcessingLatencyPercentiles = []float64{0.5}
	d := startDaemon(t, o)
	h := d.metricsHandler()
	var churn, scrapes sync.WaitGroup
	stop := make(chan struct{})
	churn.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("churn%d", i%5)
			tp, err := d.GetTopic(name)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = tp.GetChannel("c")
			_ = d.DeleteExistingTopic(name)
		}
	})
	for range 3 {
		scrapes.Go(func() {
			for range 20 {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
				if rec.Code != 200 {
					t.Errorf("scrape %d", rec.Code)
				}
			}
		})
	}
	// The churn runs for as long as the scrapes take.
	scrapes.Wait()
	close(stop)
	churn.Wait()
}

func isLinux() bool {
	_, err := http.Dir("/proc/self").Open("stat")
	return err == nil
}

// benchChannels makes a daemon with one topic of n channels holding a few
// messages each.
func benchChannels(b *testing.B, n int, e2e bool) *testDaemon {
	b.Helper()
	t := &testing.T{}
	o := NewOptions()
	o.TCPAddress, o.HTTPAddress = "127.0.0.1:0", "127.0.0.1:0"
	o.DataPath = b.TempDir()
	o.LogLevel, o.LogOutput = "error", io.Discard
	o.MemQueueSize = 100
	if e2e {
		o.E2EProcessingLatencyPercentiles = []float64{0.99, 0.5}
	}
	nd, err := New(o)
	if err != nil {
		b.Fatal(err)
	}
	if err := nd.Start(); err != nil {
		b.Fatal(err)
	}
	d := &testDaemon{NSQD: nd, t: t, tcp: nd.TCPAddr().String(), http: nd.HTTPAddr().String()}
	b.Cleanup(d.stop)
	tp, err := d.GetTopic("bench")
	if err != nil {
		b.Fatal(err)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("ch%05d", i)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, err := tp.GetChannel(name); err != nil {
			b.Fatal(err)
		}
	}
	if err := d.publish(tp, [][]byte{[]byte("a"), []byte("b")}, 0); err != nil {
		b.Fatal(err)
	}
	return d
}

// countingWriter is a ResponseWriter that only counts, so a benchmark
// measures the handler and not a growing recorder buffer.
type countingWriter struct {
	h    http.Header
	code int
	n    int
}

func (w *countingWriter) Header() http.Header         { return w.h }
func (w *countingWriter) WriteHeader(code int)        { w.code = code }
func (w *countingWriter) Write(b []byte) (int, error) { w.n += len(b); return len(b), nil }

func benchmarkGET(b *testing.B, h http.Handler, path string) {
	b.ReportAllocs()
	req := httptest.NewRequest("GET", path, nil)
	var size int
	for b.Loop() {
		w := &countingWriter{h: http.Header{}, code: 200}
		h.ServeHTTP(w, req)
		if w.code != 200 {
			b.Fatalf("%s: %d", path, w.code)
		}
		size = w.n
	}
	b.ReportMetric(float64(size), "bytes/resp")
}

// BenchmarkMetrics10kChannels is one /metrics scrape of 10,000 channels.
func BenchmarkMetrics10kChannels(b *testing.B) {
	for _, e2e := range []bool{false, true} {
		b.Run(fmt.Sprintf("e2e=%v", e2e), func(b *testing.B) {
			d := benchChannels(b, 10000, e2e)
			benchmarkGET(b, d.metricsHandler(), "/metrics")
		})
	}
}

// BenchmarkStatsJSON10kChannels is one /stats?format=json of 10,000 channels.
func BenchmarkStatsJSON10kChannels(b *testing.B) {
	d := benchChannels(b, 10000, false)
	benchmarkGET(b, newHTTPServer(d.NSQD).Handler, "/stats?format=json")
}
