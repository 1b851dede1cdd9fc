package nsqd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/statsdoc"
	"github.com/nsqgo/nsq/internal/testutil"
	"github.com/nsqgo/nsq/internal/version"
)

// reflectStatsJSON is /stats?format=json as it was made before the
// hand-written encoder: the struct tree encoded by encoding/json. It is the
// reference the encoder must match.
func reflectStatsJSON(t *testing.T, n *NSQD, q statsQuery, head statsHead) []byte {
	t.Helper()
	topics := n.Stats(q.topic, q.channel, q.includeClients)
	var producers []ClientStats
	if q.includeClients {
		producers = n.producerStats(q.topic)
	}
	b, err := json.Marshal(statsdoc.Doc{
		Version: version.Version, Health: head.health, StartTime: head.startTime, Topics: topics,
		Memory: head.mem, Producers: producers, MemoryLimits: head.limits, Drain: head.drain,
	})
	if err != nil {
		t.Fatalf("reflection encoding: %v", err)
	}
	return b
}

// writeCounter records the size of each write the encoder makes.
type writeCounter struct {
	bytes.Buffer
	writes []int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, len(p))
	return w.Buffer.Write(p)
}

// compareStatsJSON checks that the encoder's document for q decodes to the
// same value as the reflection encoding, and is the same bytes (same keys
// in the same order): the daemon is idle, so both read the same figures.
func compareStatsJSON(t *testing.T, n *NSQD, q statsQuery, head statsHead) *writeCounter {
	t.Helper()
	want := reflectStatsJSON(t, n, q, head)
	var got writeCounter
	if _, err := n.writeStatsJSON(&got, nil, q, head); err != nil {
		t.Fatalf("%+v: writeStatsJSON: %v", q, err)
	}
	var gotV, wantV any
	if err := json.Unmarshal(got.Bytes(), &gotV); err != nil {
		t.Fatalf("%+v: encoder output is not JSON: %v\n%s", q, err, got.Bytes())
	}
	if err := json.Unmarshal(want, &wantV); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotV, wantV) {
		t.Fatalf("%+v: decoded documents differ:\nencoder:    %s\nreflection: %s", q, got.Bytes(), want)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("%+v: same values, different bytes:\nencoder:    %s\nreflection: %s", q, got.Bytes(), want)
	}
	return &got
}

// TestStatsJSONEncoder: the hand-written /stats encoder gives the document
// the reflection encoder gave, across topics, channels, consumers and
// producers (plain, TLS, with odd characters in what they sent), policies,
// paused topics and channels, deferred messages, zone counters, latency
// percentiles, a drain, and every filter.
func TestStatsJSONEncoder(t *testing.T) {
	pki := newTestPKI(t)
	o := tlsOptions(t, pki)
	o.E2EProcessingLatencyPercentiles = []float64{0.5, 0.95, 0.99}
	o.TopologyRegion, o.TopologyZone = "r1", "z1"
	o.Experiments = []string{string(TopologyAwareConsumption)}
	d := startDaemon(t, o)

	d.mustDo("POST", "/topic/create?topic=aa", "", 200)
	d.mustDo("POST", "/topic/pause?topic=aa", "", 200)
	d.mustDo("POST", "/topic/policy?topic=aa", `{"max_msgs":5,"overflow":"reject_new","max_age":"90s"}`, 200)
	d.mustDo("POST", "/topic/create?topic=st", "", 200)
	for _, ch := range []string{"a", "b", "z", "tls"} {
		d.mustDo("POST", "/channel/create?topic=st&channel="+ch, "", 200)
	}
	d.mustDo("POST", "/channel/pause?topic=st&channel=b", "", 200)
	d.mustDo("POST", "/channel/policy?topic=st&channel=b", `{"max_attempts":3,"dead_letter_topic":"dead","max_bytes":1000}`, 200)
	d.mustDo("POST", "/pub?topic=st&defer=600000", "later", 200)

	// A producer whose identity needs escaping, publishing to two topics.
	odd := dialV2(t, d.tcp)
	odd.identifyJSON(map[string]any{"hostname": "h<o>st&\"q\"\\é\u2028\x01", "user_agent": "ua/1 \t<script>", "client_id": "odd"})
	for _, topic := range []string{"st", "other"} {
		odd.send("MPUB "+topic, mpubBinary([]byte("1"), []byte("2"), []byte("3")))
		odd.expect(0, "OK")
	}

	// A go-nsq consumer that finishes everything (latency percentiles).
	got := newSink()
	newConsumer(t, d.tcp, "st", "a", nil, got)
	testutil.WaitFor(t, "3 messages on st/a", 5*time.Second, func() bool { return got.distinct() == 3 })

	// A zone-local raw consumer that holds its messages in flight.
	zone := dialV2(t, d.tcp)
	zone.identifyJSON(map[string]any{"topology_region": "r1", "topology_zone": "z1", "client_id": "zoned"})
	zone.send("SUB st z")
	zone.expect(0, "OK")
	zone.send("RDY 10")

	// A TLS consumer.
	tc := dialV2(t, d.tcp)
	tc.identifyJSON(map[string]any{"tls_v1": true, "client_id": "tls"})
	tc.upgradeTLS(pki.clientTLS(true))
	tc.send("SUB st tls")
	tc.expect(0, "OK")

	testutil.WaitFor(t, "every client settled", 10*time.Second, func() bool {
		a, _ := d.channelStats("st", "a")
		z, _ := d.channelStats("st", "z")
		s, _ := d.channelStats("st", "tls")
		return a.InFlightCount == 0 && len(a.Clients) == 1 && a.Clients[0].FinishCount == 3 &&
			z.InFlightCount == 3 && z.ZoneLocalMsgCount == 3 && s.ClientCount == 1
	})

	mem := readMemStats()
	head := statsHead{health: "OK", startTime: d.startTime.Unix(), mem: &mem, limits: d.guard.info()}
	queries := []statsQuery{
		{includeClients: true},
		{includeClients: false},
		{topic: "st", includeClients: true},
		{topic: "st", channel: "z", includeClients: true},
		{channel: "a", includeClients: true},
		{channel: "zzz", includeClients: true},
		{topic: "nope", includeClients: true},
	}
	for _, q := range queries {
		compareStatsJSON(t, d.NSQD, q, head)
	}
	noMem := head
	noMem.mem, noMem.health = nil, "NOK - a <bad> disk"
	compareStatsJSON(t, d.NSQD, statsQuery{includeClients: true}, noMem)

	// While draining (st/b is paused, so the drain waits for it).
	d.Drain()
	testutil.WaitFor(t, "draining", 5*time.Second, d.Draining)
	head.drain = d.drainStatus()
	if head.drain.Remaining == nil {
		t.Fatal("draining, yet no drain_remaining")
	}
	doc := compareStatsJSON(t, d.NSQD, statsQuery{includeClients: true}, head)
	for _, want := range []string{`"draining":true`, `"drain_remaining":{`, `"zone_local_msg_count":3`,
		`"tls":true`, `"max_age":"1m30s"`, `"dead_letter_topic":"dead"`, `"deferred_count":1`,
		`"pub_counts":[{"topic":"other","count":3},{"topic":"st","count":3}]`, `\u003cscript\u003e`} {
		if !bytes.Contains(doc.Bytes(), []byte(want)) {
			t.Errorf("document lacks %s:\n%s", want, doc.Bytes())
		}
	}
}

// TestStatsJSONStreams: a large document goes out in chunks as it is made
// (not built whole first), and over HTTP arrives whole, with NSQ's headers.
func TestStatsJSONStreams(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	const channels = 1500 // about 630 KB
	tp, err := d.GetTopic("wide")
	if err != nil {
		t.Fatal(err)
	}
	for i := range channels {
		if _, err := tp.GetChannel("c" + strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	head := statsHead{health: "OK", startTime: d.startTime.Unix(), limits: d.guard.info()}
	w := compareStatsJSON(t, d.NSQD, statsQuery{includeClients: true}, head)
	if len(w.writes) < 2 {
		t.Fatalf("%d bytes in %d write(s), want chunks of %d", w.Len(), len(w.writes), statsFlushAt)
	}
	for i, n := range w.writes[:len(w.writes)-1] {
		if n < statsFlushAt {
			t.Fatalf("write %d of %d is %d bytes, want at least %d", i, len(w.writes), n, statsFlushAt)
		}
	}

	m := d.getJSON("/stats?format=json&include_mem=false") // checks the headers
	ts := m["topics"].([]any)
	if len(ts) != 1 || len(ts[0].(map[string]any)["channels"].([]any)) != channels {
		t.Fatalf("HTTP /stats: %d topics, want 1 with %d channels", len(ts), channels)
	}
}

// TestStatsJSONScalars: strings and floats come out as encoding/json
// writes them, at the edges of its escaping and of its exponent form.
func TestStatsJSONScalars(t *testing.T) {
	for _, s := range []string{"", "plain-name_1.2#ephemeral", "127.0.0.1:4150", "q\"uote", `back\slash`,
		"<>&", "tab\tnl\n", "\x00\x1f\x7f", "é", "\u2028\u2029", "bad utf8 \xff\xfe", "ua/1.0 (linux; go-nsq)"} {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("string %q: got %s, want %s", s, got, want)
		}
	}
	for _, f := range []float64{0, 1, -1, 0.5, 0.99, 0.999, 1.5e6, 123456789, 1e20, 1e21, 1.2345e21, 1e-6, 9.99e-7,
		1e-7, 1.5e-10, -2.5e-8, 3e100, 5e-324, 1.7976931348623157e308, 12345.678} {
		want, _ := json.Marshal(f)
		if got := appendJSONFloat(nil, f); !bytes.Equal(got, want) {
			t.Errorf("float %v: got %s, want %s", f, got, want)
		}
	}
}

// statsBenchDaemon is a daemon with topics × channels, for the /stats
// benchmarks.
func statsBenchDaemon(b *testing.B, topics, channels int) *testDaemon {
	b.Helper()
	o := NewOptions()
	o.TCPAddress, o.HTTPAddress = "127.0.0.1:0", "127.0.0.1:0"
	o.DataPath = b.TempDir()
	o.LogLevel, o.LogOutput = "error", io.Discard
	nd, err := New(o)
	if err != nil {
		b.Fatal(err)
	}
	if err := nd.Start(); err != nil {
		b.Fatal(err)
	}
	d := &testDaemon{NSQD: nd, t: &testing.T{}, tcp: nd.TCPAddr().String(), http: nd.HTTPAddr().String()}
	b.Cleanup(d.stop)
	for i := range topics {
		tp, err := d.GetTopic("stats" + strconv.Itoa(i))
		if err != nil {
			b.Fatal(err)
		}
		for j := range channels {
			if _, err := tp.GetChannel("ch" + strconv.Itoa(j)); err != nil {
				b.Fatal(err)
			}
		}
	}
	return d
}

// BenchmarkStatsJSONHTTP is one GET /stats?format=json over loopback, as
// bench_compare's stats scenario shapes it, read into a reused buffer.
// cpu-ns/op is the process's CPU, server and client together.
//
//	go test -run XXX -bench StatsJSONHTTP -benchtime 50x ./nsqd/
func BenchmarkStatsJSONHTTP(b *testing.B) {
	for _, shape := range []struct{ topics, channels int }{{2000, 2}, {1, 10000}} {
		b.Run(fmt.Sprintf("%dx%d", shape.topics, shape.channels), func(b *testing.B) {
			d := statsBenchDaemon(b, shape.topics, shape.channels)
			c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
			defer c.CloseIdleConnections()
			var body bytes.Buffer
			get := func() {
				resp, err := c.Get(d.url("/stats?format=json"))
				if err != nil {
					b.Fatal(err)
				}
				body.Reset()
				_, err = body.ReadFrom(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 {
					b.Fatalf("GET /stats: %v %d", err, resp.StatusCode)
				}
			}
			get() // connection and buffers
			cpu := processCPU(b)
			for b.Loop() {
				get()
			}
			b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(body.Len()), "bytes/resp")
		})
	}
}

// TestStatsJSONReplicated: with replicated topics, every node's /stats
// (the leader holds the topic, followers list it from the replicated
// state) is the reflection encoding's, local topics and filters included.
func TestStatsJSONReplicated(t *testing.T) {
	nodes := startTestCluster(t, 3)
	const topic = "replicated"
	testutil.WaitFor(t, "the replicated topic created", 30*time.Second, func() bool {
		code, _ := nodes[0].do("POST", "/topic/create?replicas=3&topic="+topic, "")
		return code == 200
	})
	testutil.WaitFor(t, "its channel created", 30*time.Second, func() bool {
		code, _ := nodes[0].do("POST", "/channel/create?topic="+topic+"&channel=c", "")
		return code == 200
	})
	waitKnown(t, nodes, topic)
	leaderOf(t, nodes, topic)
	testutil.WaitFor(t, "every node knows the channel", 30*time.Second, func() bool {
		for _, d := range nodes {
			if !d.repl.HasChannel(topic, "c") {
				return false
			}
		}
		return true
	})
	for _, d := range nodes {
		d.mustDo("POST", "/topic/create?topic=local", "", 200)
		d.mustDo("POST", "/topic/create?topic=zlocal", "", 200)
		d.mustDo("POST", "/channel/create?topic=zlocal&channel=c", "", 200)
	}
	for i, d := range nodes {
		head := statsHead{health: "OK", startTime: d.startTime.Unix(), limits: d.guard.info()}
		for _, q := range []statsQuery{
			{includeClients: true},
			{topic: topic, includeClients: true},
			{channel: "c", includeClients: true},
			{topic: topic, channel: "nope", includeClients: true},
		} {
			doc := compareStatsJSON(t, d.NSQD, q, head)
			if q.channel != "nope" && !bytes.Contains(doc.Bytes(), []byte(`"replication":{"replicas":3`)) {
				t.Fatalf("node %d, %+v: no replication object:\n%s", i, q, doc.Bytes())
			}
		}
	}
}

// BenchmarkStatsJSONEncode is the daemon's share of one /stats?format=json
// without HTTP: the document made into a reused buffer and thrown away.
//
//	go test -run XXX -bench StatsJSONEncode -benchmem ./nsqd/
func BenchmarkStatsJSONEncode(b *testing.B) {
	for _, shape := range []struct{ topics, channels int }{{2000, 2}, {1, 10000}} {
		b.Run(fmt.Sprintf("%dx%d", shape.topics, shape.channels), func(b *testing.B) {
			d := statsBenchDaemon(b, shape.topics, shape.channels)
			head := statsHead{health: "OK", startTime: d.startTime.Unix(), limits: d.guard.info()}
			q := statsQuery{includeClients: true}
			var buf []byte
			var out writeCounter
			for b.Loop() {
				out.Reset()
				var err error
				if buf, err = d.writeStatsJSON(&out.Buffer, buf, q, head); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(out.Len()), "bytes/resp")
		})
	}
}
