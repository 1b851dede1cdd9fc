package nsqd

import (
	"fmt"
	"net"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/quantile"
	"github.com/nsqgo/nsq/internal/statsd"
	"github.com/nsqgo/nsq/internal/testutil"
)

// statsdServer is a UDP socket the test opens; it checks every datagram
// and keeps counters summed and the last value of each gauge.
type statsdServer struct {
	t      *testing.T
	conn   *net.UDPConn
	prefix *regexp.Regexp
	max    int

	mu       sync.Mutex
	prefixes map[string]bool
	counters map[string]int64
	gauges   map[string]int64
	types    map[string]string
	packets  int
	bad      []string
}

func newStatsdServer(t *testing.T, prefixRE string, maxPacket int) *statsdServer {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := &statsdServer{t: t, conn: conn, max: maxPacket,
		prefix:   regexp.MustCompile(`^(` + prefixRE + `)(.+):(-?\d+)\|([cg])$`),
		prefixes: map[string]bool{}, counters: map[string]int64{}, gauges: map[string]int64{}, types: map[string]string{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			s.datagram(string(buf[:k]))
		}
	}()
	t.Cleanup(func() {
		conn.Close()
		<-done
	})
	return s
}

func (s *statsdServer) datagram(p string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.packets++
	if len(p) > s.max {
		s.bad = append(s.bad, fmt.Sprintf("datagram of %d bytes > %d", len(p), s.max))
	}
	if !strings.HasSuffix(p, "\n") {
		s.bad = append(s.bad, fmt.Sprintf("datagram not ending in a newline: %q", p))
	}
	for _, line := range strings.Split(strings.TrimSuffix(p, "\n"), "\n") {
		m := s.prefix.FindStringSubmatch(line)
		if m == nil {
			s.bad = append(s.bad, "bad line "+strconv.Quote(line))
			continue
		}
		s.prefixes[m[1]] = true
		name, typ := m[2], m[4]
		v, _ := strconv.ParseInt(m[3], 10, 64)
		if old, ok := s.types[name]; ok && old != typ {
			s.bad = append(s.bad, fmt.Sprintf("%s sent as %s and %s", name, old, typ))
		}
		s.types[name] = typ
		if typ == "c" {
			s.counters[name] += v
		} else {
			s.gauges[name] = v
		}
	}
}

// mark sends the server a counter datagram of its own (prefix, which the
// server expects, then name), waits until the reader has taken it, and
// returns the datagrams counted by then.
func (s *statsdServer) mark(t *testing.T, prefix, name string) int {
	t.Helper()
	c, err := net.Dial("udp", s.conn.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(prefix + name + ":1|c\n")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the statsd reader to take "+name, 5*time.Second, func() bool { return s.counter(name) == 1 })
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.packets
}

func (s *statsdServer) counter(name string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counters[name]
}

func (s *statsdServer) gauge(name string) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.gauges[name]
	return v, ok
}

func (s *statsdServer) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n := range s.types {
		out = append(out, n)
	}
	return out
}

func TestStatsdPush(t *testing.T) {
	const packetSize = 200
	o := testOptions(t)
	o.BroadcastAddress = "test.host"
	o.StatsdPrefix = "nsq.%s"
	o.StatsdInterval = 50 * time.Millisecond
	o.StatsdUDPPacketSize = packetSize
	o.StatsdExcludeEphemeral = true
	o.E2EProcessingLatencyPercentiles = []float64{1.0, 0.999, 0.99}
	srv := newStatsdServer(t, `nsq\.test_host_\d+\.`, packetSize)
	o.StatsdAddress = srv.conn.LocalAddr().String()
	d := startDaemon(t, o)
	// %s is <broadcast-address>_<broadcast-http-port>, the bound port here.
	wantPrefix := fmt.Sprintf("nsq.test_host_%d.", d.HTTPAddr().(*net.TCPAddr).Port)

	const topic = "st"
	tp, _ := d.GetTopic(topic)
	if _, err := tp.GetChannel("idle"); err != nil {
		t.Fatal(err)
	}
	queueConsumer(t, d, topic, "c", 10, 0, func(m *nsq.Message) { m.Finish() })
	// An ephemeral topic and channel, excluded from the push.
	queueConsumer(t, d, "gone#ephemeral", "x#ephemeral", 10, 0, func(m *nsq.Message) { m.Finish() })
	queueConsumer(t, d, topic, "eph#ephemeral", 10, 0, func(m *nsq.Message) { m.Finish() })
	p := newProducer(t, d.tcp)
	if err := p.MultiPublish(topic, bodies("s", 5)); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish("gone#ephemeral", []byte("x")); err != nil {
		t.Fatal(err)
	}

	tn, cn := "topic.st.", "topic.st.channel.c."
	testutil.WaitFor(t, "first 5 messages in statsd", 10*time.Second, func() bool {
		v, _ := srv.gauge(tn + "channel.idle.depth")
		return srv.counter(tn+"message_count") == 5 && srv.counter(cn+"message_count") == 5 && v == 5
	})
	// Counters are deltas: after 3 more messages the sum of every push is 8,
	// where totals would have summed to far more.
	if err := p.MultiPublish(topic, bodies("t", 3)); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "8 messages in statsd", 10*time.Second, func() bool {
		v, _ := srv.gauge(tn + "channel.idle.depth")
		return v == 8 && srv.counter(cn+"message_count") == 8
	})
	srv.mu.Lock()
	seen := srv.packets
	srv.mu.Unlock()
	testutil.WaitFor(t, "three more datagrams with no traffic", 10*time.Second, func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.packets >= seen+3
	})
	if got := srv.counter(tn + "message_count"); got != 8 {
		t.Errorf("sum of message_count deltas = %d, want 8", got)
	}
	if got := srv.counter(tn + "message_bytes"); got != int64(5*len("s-0")+3*len("t-0")) {
		t.Errorf("sum of message_bytes deltas = %d", got)
	}
	testutil.WaitFor(t, "e2e gauges", 5*time.Second, func() bool {
		v, ok := srv.gauge(cn + "e2e_processing_latency_100")
		return ok && v > 0
	})

	wantTypes := map[string]string{
		tn + "message_count": "c", tn + "message_bytes": "c", tn + "depth": "g", tn + "backend_depth": "g",
		tn + "e2e_processing_latency_100": "g", tn + "e2e_processing_latency_99_9": "g", tn + "e2e_processing_latency_99": "g",
		cn + "message_count": "c", cn + "depth": "g", cn + "backend_depth": "g", cn + "in_flight_count": "g",
		cn + "deferred_count": "g", cn + "requeue_count": "c", cn + "timeout_count": "c", cn + "clients": "g",
		cn + "e2e_processing_latency_100": "g", cn + "e2e_processing_latency_99_9": "g", cn + "e2e_processing_latency_99": "g",
		"mem.heap_objects": "g", "mem.heap_idle_bytes": "g", "mem.heap_in_use_bytes": "g", "mem.heap_released_bytes": "g",
		"mem.gc_pause_usec_100": "g", "mem.gc_pause_usec_99": "g", "mem.gc_pause_usec_95": "g", "mem.next_gc_bytes": "g",
		"mem.gc_runs": "c",
	}
	srv.mu.Lock()
	for name, typ := range wantTypes {
		if got, ok := srv.types[name]; !ok || got != typ {
			t.Errorf("%s: type %q, want %q", name, got, typ)
		}
	}
	for _, b := range srv.bad {
		t.Error(b)
	}
	packets := srv.packets
	if len(srv.prefixes) != 1 || !srv.prefixes[wantPrefix] {
		t.Errorf("prefixes %v, want only %s", srv.prefixes, wantPrefix)
	}
	srv.mu.Unlock()
	if packets < 2 {
		t.Errorf("only %d datagrams", packets)
	}
	for _, name := range srv.names() {
		if strings.Contains(name, "#ephemeral") {
			t.Errorf("ephemeral name pushed with --statsd-exclude-ephemeral: %s", name)
		}
	}
	if v, _ := srv.gauge(cn + "clients"); v != 1 {
		t.Errorf("clients = %d, want 1", v)
	}
	if v, _ := srv.gauge(cn + "depth"); v != 0 {
		t.Errorf("c depth = %d, want 0", v)
	}
	// E2E gauges are ns and ordered: max >= p99.9 >= p99.
	m100, _ := srv.gauge(cn + "e2e_processing_latency_100")
	m999, _ := srv.gauge(cn + "e2e_processing_latency_99_9")
	m99, _ := srv.gauge(cn + "e2e_processing_latency_99")
	if !(m100 >= m999 && m999 >= m99 && m99 > 0 && m100 < int64(10*time.Second)) {
		t.Errorf("e2e gauges 100=%d 99_9=%d 99=%d", m100, m999, m99)
	}
}

func TestStatsdStopsOnShutdown(t *testing.T) {
	srv := newStatsdServer(t, `x\.`, 508)
	o := testOptions(t)
	o.StatsdAddress = srv.conn.LocalAddr().String()
	o.StatsdPrefix = "x"
	o.StatsdInterval = 20 * time.Millisecond
	o.StatsdMemStats = true
	d := startDaemon(t, o)
	testutil.WaitFor(t, "a push", 5*time.Second, func() bool { _, ok := srv.gauge("mem.heap_objects"); return ok })
	const loop = "nsqd.(*NSQD).statsdLoop("
	if n := goroutinesIn(loop); n != 1 {
		t.Fatalf("%d statsd loops running, want 1", n)
	}
	d.stop() // must return: the loop ends with the daemon
	// No loop is left to push again; once the reader has a marker sent
	// after the stop, it has everything nsqd sent before it returned.
	if n := goroutinesIn(loop); n != 0 {
		t.Fatalf("%d statsd loops still running after shutdown", n)
	}
	before := srv.mark(t, "x.", "before")
	if after := srv.mark(t, "x.", "after"); after != before+1 {
		t.Errorf("%d datagrams after shutdown", after-before-1)
	}
}

func TestStatsdOptionsValidated(t *testing.T) {
	o := testOptions(t)
	o.StatsdAddress = "127.0.0.1:8125"
	o.StatsdInterval = 0
	if _, err := New(o); err == nil {
		t.Fatal("New accepted --statsd-interval=0")
	}
}

func TestStatsdPrefix(t *testing.T) {
	for _, c := range []struct{ prefix, addr, want string }{
		{"nsq.%s", "host.example.com", "nsq.host_example_com_4151."},
		{"nsq.%s.", "10.0.0.1", "nsq.10_0_0_1_4151."},
		{"fixed", "h", "fixed."},
		{"", "h", ""},
	} {
		n := &NSQD{opts: &Options{StatsdPrefix: c.prefix, BroadcastAddress: c.addr, BroadcastHTTPPort: 4151}}
		if got := n.statsdPrefix(); got != c.want {
			t.Errorf("prefix %q addr %q: %q, want %q", c.prefix, c.addr, got, c.want)
		}
	}
}

func TestPercentileName(t *testing.T) {
	for q, want := range map[float64]string{1.0: "100", 0.999: "99_9", 0.99: "99", 0.95: "95", 0.5: "50", 0.9999: "99_99", 0.001: "0_1"} {
		if got := percentileName(q); got != want {
			t.Errorf("percentileName(%v) = %q, want %q", q, got, want)
		}
	}
}

// TestStatsdLines checks one push's lines and the deltas between pushes
// without a network.
func TestStatsdLines(t *testing.T) {
	lines := func(c *statsd.Client) map[string]string {
		m := map[string]string{}
		for _, p := range c.Packets() {
			for _, l := range strings.Split(strings.TrimSuffix(string(p), "\n"), "\n") {
				k, v, _ := strings.Cut(l, ":")
				m[k] = v
			}
		}
		return m
	}
	lat := &quantile.Result{Count: 3, Percentiles: []map[string]float64{{"quantile": 0.99, "value": 1500}}}
	push1 := []TopicStats{{
		TopicName: "a", MessageCount: 10, MessageBytes: 100, Depth: 2, BackendDepth: 1, E2eProcessingLatency: lat,
		Channels: []ChannelStats{
			{ChannelName: "c", MessageCount: 10, RequeueCount: 2, TimeoutCount: 1, Depth: 3, InFlightCount: 4,
				DeferredCount: 5, ClientCount: 6, E2eProcessingLatency: lat},
			{ChannelName: "e#ephemeral", MessageCount: 7, E2eProcessingLatency: &quantile.Result{}},
		},
	}, {TopicName: "t#ephemeral", MessageCount: 1, E2eProcessingLatency: &quantile.Result{}}}
	c := statsd.NewClient("p.", 508)
	last := statsdLines(c, push1, &memStats{HeapObjects: 9, GCTotalRuns: 4}, statsdLast{}, false)
	got := lines(c)
	for k, v := range map[string]string{
		"p.topic.a.message_count": "10|c", "p.topic.a.message_bytes": "100|c", "p.topic.a.depth": "2|g",
		"p.topic.a.backend_depth": "1|g", "p.topic.a.e2e_processing_latency_99": "1500|g",
		"p.topic.a.channel.c.message_count": "10|c", "p.topic.a.channel.c.requeue_count": "2|c",
		"p.topic.a.channel.c.timeout_count": "1|c", "p.topic.a.channel.c.depth": "3|g",
		"p.topic.a.channel.c.in_flight_count": "4|g", "p.topic.a.channel.c.deferred_count": "5|g",
		"p.topic.a.channel.c.clients": "6|g", "p.topic.a.channel.c.e2e_processing_latency_99": "1500|g",
		"p.topic.a.channel.e#ephemeral.message_count": "7|c", "p.topic.t#ephemeral.message_count": "1|c",
		"p.mem.heap_objects": "9|g", "p.mem.gc_runs": "4|c",
	} {
		if got[k] != v {
			t.Errorf("push 1: %s = %q, want %q", k, got[k], v)
		}
	}

	// Second push: deltas; channel c was deleted and created again, so its
	// counters start from zero; ephemeral queues excluded.
	push2 := []TopicStats{{
		TopicName: "a", MessageCount: 15, MessageBytes: 160, E2eProcessingLatency: &quantile.Result{},
		Channels: []ChannelStats{
			{ChannelName: "c", MessageCount: 3, RequeueCount: 0, TimeoutCount: 1, E2eProcessingLatency: &quantile.Result{}},
			{ChannelName: "e#ephemeral", MessageCount: 9, E2eProcessingLatency: &quantile.Result{}},
		},
	}, {TopicName: "t#ephemeral", MessageCount: 2, E2eProcessingLatency: &quantile.Result{}}}
	c = statsd.NewClient("p.", 508)
	statsdLines(c, push2, &memStats{GCTotalRuns: 6}, last, true)
	got = lines(c)
	for k, v := range map[string]string{
		"p.topic.a.message_count": "5|c", "p.topic.a.message_bytes": "60|c",
		"p.topic.a.channel.c.message_count": "3|c", "p.topic.a.channel.c.requeue_count": "0|c",
		"p.topic.a.channel.c.timeout_count": "0|c", "p.mem.gc_runs": "2|c",
	} {
		if got[k] != v {
			t.Errorf("push 2: %s = %q, want %q", k, got[k], v)
		}
	}
	for k := range got {
		if strings.Contains(k, "#ephemeral") || strings.Contains(k, "e2e") {
			t.Errorf("push 2 has %s", k)
		}
	}
}

// goroutinesIn counts the goroutines whose stack has a frame of fn (a
// qualified function name with its opening parenthesis).
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			count++
		}
	}
	return count
}
