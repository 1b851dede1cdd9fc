package nsqd

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
	"github.com/nsqgo/nsq/internal/version"
)

// httpResult is one HTTP exchange.
type httpResult struct {
	code int
	body string
	hdr  http.Header
}

// call sends a request; body may be a string or an io.Reader (a reader
// that is not a *strings.Reader or *bytes.Reader is sent chunked, with no
// Content-Length).
func (d *testDaemon) call(method, path string, body any) httpResult {
	d.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	case io.Reader:
		r = b
	}
	req, err := http.NewRequest(method, d.url(path), r)
	if err != nil {
		d.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		d.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return httpResult{resp.StatusCode, string(b), resp.Header}
}

const nsqHeader = "nsq; version=1.0"

// expectV1 checks a V1 success with a text payload (or none).
func expectV1(t *testing.T, what string, r httpResult, body string) {
	t.Helper()
	if r.code != 200 || r.body != body {
		t.Fatalf("%s: got %d %q, want 200 %q", what, r.code, r.body, body)
	}
	if h := r.hdr.Get("X-NSQ-Content-Type"); h != nsqHeader {
		t.Fatalf("%s: X-NSQ-Content-Type %q", what, h)
	}
	if ct := r.hdr.Get("Content-Type"); strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s: text payload with Content-Type %q", what, ct)
	}
}

// expectErr checks a V1 error: status, JSON {"message":text}, headers.
func expectErr(t *testing.T, what string, r httpResult, code int, text string) {
	t.Helper()
	want, _ := json.Marshal(map[string]string{"message": text})
	if r.code != code || r.body != string(want) {
		t.Fatalf("%s: got %d %s, want %d %s", what, r.code, r.body, code, want)
	}
	if ct := r.hdr.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Fatalf("%s: Content-Type %q", what, ct)
	}
	if h := r.hdr.Get("X-NSQ-Content-Type"); h != nsqHeader {
		t.Fatalf("%s: X-NSQ-Content-Type %q", what, h)
	}
}

// getJSON fetches path and decodes a V1 JSON object.
func (d *testDaemon) getJSON(path string) map[string]any {
	d.t.Helper()
	r := d.call("GET", path, nil)
	if r.code != 200 {
		d.t.Fatalf("GET %s: %d %s", path, r.code, r.body)
	}
	if ct := r.hdr.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		d.t.Fatalf("GET %s: Content-Type %q", path, ct)
	}
	if h := r.hdr.Get("X-NSQ-Content-Type"); h != nsqHeader {
		d.t.Fatalf("GET %s: X-NSQ-Content-Type %q", path, h)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(r.body), &m); err != nil {
		d.t.Fatalf("GET %s: %v: %s", path, err, r.body)
	}
	return m
}

func keysOf(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func expectKeys(t *testing.T, what string, m map[string]any, want ...string) {
	t.Helper()
	sort.Strings(want)
	if got := keysOf(m); !reflect.DeepEqual(got, want) {
		t.Fatalf("%s keys:\n got %v\nwant %v", what, got, want)
	}
}

// mpubBinary encodes the /mpub?binary=true body: [count] then [size][data]...
func mpubBinary(parts ...[]byte) []byte {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.BigEndian, int32(len(parts)))
	for _, p := range parts {
		_ = binary.Write(&b, binary.BigEndian, int32(len(p)))
		b.Write(p)
	}
	return b.Bytes()
}

// onlyReader hides the concrete type so net/http sends the body chunked.
type onlyReader struct{ io.Reader }

func TestHTTPPingAndRouter(t *testing.T) {
	d := startDaemon(t, testOptions(t))

	r := d.call("GET", "/ping", nil)
	if r.code != 200 || r.body != "OK" {
		t.Fatalf("/ping: %d %q", r.code, r.body)
	}
	if r.hdr.Get("X-NSQ-Content-Type") != "" || !strings.HasPrefix(r.hdr.Get("Content-Type"), "text/plain") {
		t.Fatalf("/ping headers: %v", r.hdr)
	}
	d.setHealth(errors.New("disk on fire"))
	r = d.call("GET", "/ping", nil)
	if r.code != 500 || r.body != "NOK - disk on fire" {
		t.Fatalf("/ping unhealthy: %d %q", r.code, r.body)
	}
	if h := d.getJSON("/stats?format=json")["health"]; h != "NOK - disk on fire" {
		t.Fatalf("/stats health %v", h)
	}
	d.setHealth(nil)
	if r = d.call("GET", "/ping", nil); r.code != 200 {
		t.Fatalf("/ping after recovery: %d", r.code)
	}

	expectErr(t, "unknown path", d.call("GET", "/nope", nil), 404, "NOT_FOUND")
	expectErr(t, "old-style URL", d.call("POST", "/create_topic?topic=x", nil), 404, "NOT_FOUND")
	r = d.call("GET", "/pub?topic=x", nil)
	expectErr(t, "GET /pub", r, 405, "METHOD_NOT_ALLOWED")
	if !strings.Contains(r.hdr.Get("Allow"), "POST") {
		t.Fatalf("405 Allow header %q", r.hdr.Get("Allow"))
	}
	expectErr(t, "POST /ping", d.call("POST", "/ping", nil), 405, "METHOD_NOT_ALLOWED")
	expectErr(t, "DELETE /topic/create", d.call("DELETE", "/topic/create?topic=x", nil), 405, "METHOD_NOT_ALLOWED")
	if _, ok := d.GetExistingTopic("x"); ok {
		t.Fatal("a refused request created a topic")
	}
}

func TestHTTPInfo(t *testing.T) {
	o := testOptions(t)
	o.BroadcastAddress = "bcast.example"
	d := startDaemon(t, o)
	m := d.getJSON("/info")
	if m["version"] != version.Version || m["release"] != version.Release {
		t.Errorf("/info version %v release %v, want %s and %s", m["version"], m["release"], version.Version, version.Release)
	}
	expectKeys(t, "/info", m, "version", "broadcast_address", "hostname", "http_port", "tcp_port", "start_time",
		"max_heartbeat_interval", "max_output_buffer_size", "max_output_buffer_timeout", "max_deflate_level",
		"topology_zone", "topology_region", // NSQ master (#1301)
		"memory_limits", "release") // memory_limits and release are ours, not NSQ's
	port := func(addr string) float64 {
		_, p, _ := net.SplitHostPort(addr)
		n, _ := strconv.Atoi(p)
		return float64(n)
	}
	host, _ := hostname()
	want := map[string]any{
		"version":                   version.Version,
		"broadcast_address":         "bcast.example",
		"hostname":                  host,
		"http_port":                 port(d.http),
		"tcp_port":                  port(d.tcp),
		"max_heartbeat_interval":    float64(60 * time.Second), // ns
		"max_output_buffer_size":    float64(64 * 1024),
		"max_output_buffer_timeout": float64(30 * time.Second),
		"max_deflate_level":         float64(6),
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("/info %s = %v (%T), want %v", k, m[k], m[k], v)
		}
	}
	st, ok := m["start_time"].(float64)
	if !ok || st > float64(time.Now().Unix()) || st < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("/info start_time %v", m["start_time"])
	}
}

func TestHTTPPub(t *testing.T) {
	o := testOptions(t)
	o.MaxMsgSize = 100
	d := startDaemon(t, o)

	expectV1(t, "/pub", d.call("POST", "/pub?topic=p", "hello"), "OK")
	expectV1(t, "/pub max size", d.call("POST", "/pub?topic=p", strings.Repeat("x", 100)), "OK")
	// Chunked (no Content-Length) of exactly the limit is fine too.
	expectV1(t, "/pub chunked", d.call("POST", "/pub?topic=p", onlyReader{strings.NewReader(strings.Repeat("y", 100))}), "OK")
	ts := d.topicStats("p")
	if ts.Depth != 3 || ts.MessageCount != 3 || ts.MessageBytes != 205 {
		t.Fatalf("topic p: depth %d count %d bytes %d, want 3 3 205", ts.Depth, ts.MessageCount, ts.MessageBytes)
	}

	big := strings.Repeat("z", 101)
	expectErr(t, "too big by Content-Length", d.call("POST", "/pub?topic=p", big), 413, "MSG_TOO_BIG")
	expectErr(t, "too big by actual size", d.call("POST", "/pub?topic=p", onlyReader{strings.NewReader(big)}), 413, "MSG_TOO_BIG")
	expectErr(t, "empty body", d.call("POST", "/pub?topic=p", ""), 400, "MSG_EMPTY")
	expectErr(t, "no topic", d.call("POST", "/pub", "x"), 400, "MISSING_ARG_TOPIC")
	expectErr(t, "bad topic", d.call("POST", "/pub?topic=bad!", "x"), 400, "INVALID_TOPIC")
	expectErr(t, "empty topic", d.call("POST", "/pub?topic=", "x"), 400, "INVALID_TOPIC")
	expectErr(t, "long topic", d.call("POST", "/pub?topic="+strings.Repeat("a", 65), "x"), 400, "INVALID_TOPIC")
	expectErr(t, "malformed query", d.call("POST", "/pub?topic=%zz", "x"), 400, "INVALID_REQUEST")
	// The body is checked before the topic (NSQ reads it first).
	expectErr(t, "empty body, no topic", d.call("POST", "/pub", ""), 400, "MSG_EMPTY")
	for _, v := range []string{"abc", "-1", "", "3600001", "1.5", "99999999999999999999"} {
		expectErr(t, "defer="+v, d.call("POST", "/pub?topic=deferbad&defer="+v, "x"), 400, "INVALID_DEFER")
	}
	if _, ok := d.GetExistingTopic("deferbad"); ok {
		t.Fatal("a refused /pub created its topic")
	}
	// Topic errors come before defer errors.
	expectErr(t, "bad topic and defer", d.call("POST", "/pub?topic=bad!&defer=x", "x"), 400, "INVALID_TOPIC")
	if p := d.topicStats("p"); p.MessageCount != 3 {
		t.Fatalf("refused publishes counted: %d", p.MessageCount)
	}

	// ?defer= holds the message in the channel's deferred queue, due that
	// many milliseconds after its publish (when it then comes is the fake
	// clock's: TestUnitDeferredDueOrder).
	d.mustDo("POST", "/topic/create?topic=dt", "", 200)
	d.mustDo("POST", "/channel/create?topic=dt&channel=c", "", 200)
	expectV1(t, "/pub?defer", d.call("POST", "/pub?topic=dt&defer=300000", "later"), "OK")
	expectV1(t, "/pub?defer=0", d.call("POST", "/pub?topic=dt&defer=0", "now"), "OK")
	expectV1(t, "/pub?defer=max", d.call("POST", "/pub?topic=dt&defer=3600000", "much later"), "OK")
	if cs, _ := d.channelStats("dt", "c"); cs.DeferredCount != 2 || cs.Depth != 1 {
		t.Fatalf("after /pub?defer: deferred %d depth %d, want 2 and 1", cs.DeferredCount, cs.Depth)
	}
	if got := d.firstDeferredDelay("dt", "c"); got != 300*time.Second {
		t.Fatalf("/pub?defer=300000 deferred the message by %v, want 5m", got)
	}
}

// firstDeferredDelay is how long after its publish the channel's deferred
// message due first is due.
func (d *testDaemon) firstDeferredDelay(topic, channel string) time.Duration {
	d.t.Helper()
	tp, _ := d.GetExistingTopic(topic)
	ch, ok := tp.GetExistingChannel(channel)
	if !ok {
		d.t.Fatalf("no channel %s/%s", topic, channel)
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	m, ok := ch.deferredPQ.Peek()
	if !ok {
		d.t.Fatalf("%s/%s has no deferred message in memory", topic, channel)
	}
	return time.Duration(m.Due - m.Timestamp)
}

func TestHTTPMPUB(t *testing.T) {
	o := testOptions(t)
	o.MaxMsgSize = 50
	o.MaxBodySize = 1000
	d := startDaemon(t, o)
	d.mustDo("POST", "/topic/create?topic=m", "", 200)
	d.mustDo("POST", "/channel/create?topic=m&channel=c", "", 200)
	got := newSink()
	newConsumer(t, d.tcp, "m", "c", nil, got)

	var want []string
	pub := func(query string, body any, bodies ...string) {
		t.Helper()
		expectV1(t, "/mpub?"+query, d.call("POST", "/mpub?topic=m"+query, body), "OK")
		want = append(want, bodies...)
	}
	pub("", "t1\nt2\n", "t1", "t2")                                // trailing newline
	pub("", "t3\n\n\nt4", "t3", "t4")                              // empty lines skipped, no trailing newline
	pub("&binary=false", "t5\r\nt6\n", "t5\r", "t6")               // only \n separates; \r stays
	pub("&binary=0", "\n\n", []string{}...)                        // nothing at all is fine
	pub("", "", []string{}...)                                     // empty body
	pub("", strings.Repeat("L", 50)+"\n", strings.Repeat("L", 50)) // a line of exactly max-msg-size
	pub("&binary=true", mpubBinary([]byte("b1\nb1"), []byte("b2")), "b1\nb1", "b2")
	pub("&binary=1", mpubBinary([]byte("b3")), "b3")
	pub("&binary=T", mpubBinary([]byte("b4")), "b4")
	pub("&binary=yes", mpubBinary([]byte("b5")), "b5") // unknown value: binary
	pub("&binary=", mpubBinary([]byte("b6")), "b6")    // empty value: binary too (as NSQ)
	pub("&binary=true", onlyReader{bytes.NewReader(mpubBinary([]byte("b7")))}, "b7")
	testutil.WaitFor(t, "every /mpub message", 5*time.Second, func() bool { return got.has(want) })
	testutil.WaitFor(t, "no more deliveries", 5*time.Second, func() bool {
		cs, _ := d.channelStats("m", "c")
		return cs.Depth == 0 && cs.InFlightCount == 0
	})
	if got.distinct() != len(want) || got.duplicates() != 0 {
		t.Fatalf("got %q, want %q", got.bodiesSeen(), want)
	}

	// Errors; none of them publishes anything or creates the topic.
	size := func(n int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(n)) }
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	for _, c := range []struct {
		name, query string
		body        any
		code        int
		text        string
	}{
		{"body too big by Content-Length", "", strings.Repeat("a\n", 501), 413, "BODY_TOO_BIG"},
		{"body too big chunked", "", onlyReader{strings.NewReader(strings.Repeat("a\n", 501))}, 413, "BODY_TOO_BIG"},
		{"binary body too big", "&binary=true", mpubBinary(bytes.Repeat([]byte("x"), 50), make([]byte, 1000)), 413, "BODY_TOO_BIG"},
		{"text line too big", "", "ok\n" + strings.Repeat("x", 51) + "\n", 413, "MSG_TOO_BIG"},
		{"binary count 0", "&binary=true", size(0), 413, "BAD_BODY"},
		{"binary count negative", "&binary=true", size(-1), 413, "BAD_BODY"},
		{"binary count too big", "&binary=true", cat(size(200), size(1), []byte("x")), 413, "BAD_BODY"},
		{"binary no count", "&binary=true", []byte{0, 0}, 413, "BAD_BODY"},
		{"binary empty body", "&binary=true", "", 413, "BAD_BODY"},
		{"binary part size 0", "&binary=true", cat(size(1), size(0)), 413, "BAD_MESSAGE"},
		{"binary part too big", "&binary=true", cat(size(1), size(51), make([]byte, 51)), 413, "BAD_MESSAGE"},
		{"binary missing part", "&binary=true", cat(size(2), size(1), []byte("x")), 413, "BAD_MESSAGE"},
		{"binary short part", "&binary=true", cat(size(1), size(10), []byte("xyz")), 413, "BAD_MESSAGE"},
		{"text, binary garbage", "&binary=1", "hello\nworld\n", 413, "BAD_BODY"},
		{"no topic", "", "x", 400, "MISSING_ARG_TOPIC"},
		{"bad topic", "", "x", 400, "INVALID_TOPIC"},
		{"malformed query", "", "x", 400, "INVALID_REQUEST"},
	} {
		path := "/mpub?topic=mbad" + c.query
		switch c.name {
		case "no topic":
			path = "/mpub"
		case "bad topic":
			path = "/mpub?topic=m!"
		case "malformed query":
			path = "/mpub?topic=mbad&%zz"
		}
		expectErr(t, c.name, d.call("POST", path, c.body), c.code, c.text)
	}
	if _, ok := d.GetExistingTopic("mbad"); ok {
		t.Fatal("a refused /mpub created its topic")
	}
	if n := d.topicStats("m").MessageCount; n != uint64(len(want)) {
		t.Fatalf("topic m counted %d messages, want %d", n, len(want))
	}
}

func TestHTTPStatsJSON(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	if m := d.getJSON("/stats?format=json"); m["topics"] == nil || len(m["topics"].([]any)) != 0 || m["producers"] != nil {
		t.Fatalf("empty daemon stats: topics %#v producers %#v", m["topics"], m["producers"])
	}
	d.mustDo("POST", "/channel/create?topic=st&channel=b", "", 404) // topic must exist first
	d.mustDo("POST", "/topic/create?topic=st", "", 200)
	d.mustDo("POST", "/channel/create?topic=st&channel=a", "", 200)
	d.mustDo("POST", "/channel/create?topic=st&channel=b", "", 200)
	d.mustDo("POST", "/channel/pause?topic=st&channel=b", "", 200)
	d.mustDo("POST", "/topic/create?topic=aa", "", 200)
	d.mustDo("POST", "/topic/pause?topic=aa", "", 200)
	p := newProducer(t, d.tcp)
	if err := p.MultiPublish("st", bodies("s", 7)); err != nil {
		t.Fatal(err)
	}
	got := newSink()
	cfg := nsqConfig()
	cfg.UserAgent = "stats-test/1.0"
	newConsumer(t, d.tcp, "st", "a", cfg, got)
	testutil.WaitFor(t, "7 messages on st/a", 5*time.Second, func() bool { return got.distinct() == 7 })
	testutil.WaitFor(t, "st/a to settle", 5*time.Second, func() bool {
		cs, ok := d.channelStats("st", "a")
		return ok && cs.InFlightCount == 0 && len(cs.Clients) == 1 && cs.Clients[0].FinishCount == 7
	})

	m := d.getJSON("/stats?format=json")
	expectKeys(t, "/stats", m, "version", "health", "start_time", "topics", "memory", "producers", "memory_limits")
	limits, _ := m["memory_limits"].(map[string]any)
	expectKeys(t, "/stats memory_limits", limits, "state", "limit_source", "hard_limit_bytes", "soft_limit_bytes",
		"usage_bytes", "memory_queue_bytes", "in_flight_bytes", "max_memory_queue_bytes", "deferred_bytes", "max_deferred_bytes",
		"unfinished_bodies", "unfinished_body_bytes", "max_unfinished_body_bytes")
	if limits["state"] != "normal" || limits["soft_limit_bytes"].(float64) <= 0 {
		t.Fatalf("memory_limits = %v", limits)
	}
	if m["version"] != version.Version || m["health"] != "OK" {
		t.Fatalf("version %v health %v", m["version"], m["health"])
	}
	expectKeys(t, "memory", m["memory"].(map[string]any), "heap_objects", "heap_idle_bytes", "heap_in_use_bytes",
		"heap_released_bytes", "gc_pause_usec_100", "gc_pause_usec_99", "gc_pause_usec_95", "next_gc_bytes", "gc_total_runs")
	topics := m["topics"].([]any)
	if len(topics) != 2 {
		t.Fatalf("%d topics", len(topics))
	}
	aa, st := topics[0].(map[string]any), topics[1].(map[string]any) // sorted by name
	// NSQ's keys and no more: a queue without a policy shows none of the
	// policy fields (TestPolicyAPIShapeAndInheritance shows them set).
	topicKeys := []string{"topic_name", "channels", "depth", "backend_depth", "message_count", "message_bytes", "paused", "e2e_processing_latency"}
	expectKeys(t, "topic", st, topicKeys...)
	noLatency := map[string]any{"count": float64(0), "percentiles": nil}
	if aa["topic_name"] != "aa" || aa["paused"] != true || len(aa["channels"].([]any)) != 0 {
		t.Fatalf("topic aa: %v", aa)
	}
	if st["topic_name"] != "st" || st["paused"] != false || st["message_count"] != float64(7) ||
		st["message_bytes"] != float64(21) || st["depth"] != float64(0) || !reflect.DeepEqual(st["e2e_processing_latency"], noLatency) {
		t.Fatalf("topic st: %v", st)
	}
	chans := st["channels"].([]any)
	if len(chans) != 2 {
		t.Fatalf("%d channels", len(chans))
	}
	ca, cb := chans[0].(map[string]any), chans[1].(map[string]any)
	expectKeys(t, "channel", ca, "channel_name", "depth", "backend_depth", "in_flight_count", "deferred_count",
		"message_count", "requeue_count", "timeout_count", "client_count", "clients", "paused", "e2e_processing_latency")
	if ca["channel_name"] != "a" || ca["message_count"] != float64(7) || ca["client_count"] != float64(1) ||
		ca["paused"] != false || !reflect.DeepEqual(ca["e2e_processing_latency"], noLatency) {
		t.Fatalf("channel a: %v", ca)
	}
	if cb["channel_name"] != "b" || cb["paused"] != true || cb["depth"] != float64(7) || cb["client_count"] != float64(0) ||
		cb["clients"] == nil || len(cb["clients"].([]any)) != 0 {
		t.Fatalf("channel b: %v", cb)
	}
	clientKeys := []string{"client_id", "hostname", "version", "remote_address", "state", "ready_count",
		"in_flight_count", "message_count", "finish_count", "requeue_count", "connect_ts", "sample_rate",
		"deflate", "snappy", "user_agent", "tls", "tls_cipher_suite", "tls_version", "tls_negotiated_protocol",
		"tls_negotiated_protocol_is_mutual",
		"topology_zone", "topology_region"} // NSQ master (#1301)
	cl := ca["clients"].([]any)[0].(map[string]any)
	expectKeys(t, "consumer client", cl, clientKeys...)
	if cl["version"] != "V2" || cl["state"] != float64(stateSubscribed) || cl["message_count"] != float64(7) ||
		cl["finish_count"] != float64(7) || cl["user_agent"] != "stats-test/1.0" || cl["ready_count"].(float64) < 1 {
		t.Fatalf("consumer client: %v", cl)
	}
	prods := m["producers"].([]any)
	if len(prods) != 1 {
		t.Fatalf("producers: %v", prods)
	}
	pr := prods[0].(map[string]any)
	expectKeys(t, "producer", pr, append(clientKeys, "pub_counts")...)
	if !reflect.DeepEqual(pr["pub_counts"], []any{map[string]any{"topic": "st", "count": float64(7)}}) {
		t.Fatalf("producer pub_counts: %v", pr["pub_counts"])
	}

	// Filters.
	m = d.getJSON("/stats?format=json&topic=st")
	if ts := m["topics"].([]any); len(ts) != 1 || ts[0].(map[string]any)["topic_name"] != "st" {
		t.Fatalf("topic filter: %v", ts)
	}
	m = d.getJSON("/stats?format=json&topic=st&channel=b")
	ts := m["topics"].([]any)
	if cs := ts[0].(map[string]any)["channels"].([]any); len(ts) != 1 || len(cs) != 1 || cs[0].(map[string]any)["channel_name"] != "b" {
		t.Fatalf("channel filter: %v", ts)
	}
	// A channel filter drops the topics without that channel.
	if ts := d.getJSON("/stats?format=json&channel=a")["topics"].([]any); len(ts) != 1 {
		t.Fatalf("channel filter across topics: %v", ts)
	}
	if ts := d.getJSON("/stats?format=json&channel=zzz")["topics"].([]any); len(ts) != 0 {
		t.Fatalf("unknown channel filter: %v", ts)
	}
	if m := d.getJSON("/stats?format=json&topic=nope"); m["topics"] != nil {
		t.Fatalf("unknown topic filter: %v", m["topics"])
	}
	for _, v := range []string{"false", "0"} {
		m = d.getJSON("/stats?format=json&include_clients=" + v)
		ca := m["topics"].([]any)[1].(map[string]any)["channels"].([]any)[0].(map[string]any)
		if ca["clients"] != nil || ca["client_count"] != float64(1) || m["producers"] != nil {
			t.Fatalf("include_clients=%s: clients %v count %v producers %v", v, ca["clients"], ca["client_count"], m["producers"])
		}
		if _, ok := d.getJSON("/stats?format=json&include_mem=" + v)["memory"]; ok {
			t.Fatalf("include_mem=%s still has memory", v)
		}
	}
	if _, ok := d.getJSON("/stats?format=json&include_mem=maybe")["memory"]; !ok {
		t.Fatal("include_mem=maybe (not a bool) dropped memory")
	}
	expectErr(t, "malformed query", d.call("GET", "/stats?format=json&%zz", nil), 400, "INVALID_REQUEST")
}

func TestHTTPStatsLatency(t *testing.T) {
	o := testOptions(t)
	o.E2EProcessingLatencyPercentiles = []float64{0.5, 0.99}
	d := startDaemon(t, o)
	p := newProducer(t, d.tcp)
	d.mustDo("POST", "/topic/create?topic=lat", "", 200)
	d.mustDo("POST", "/channel/create?topic=lat&channel=c", "", 200)
	if err := p.MultiPublish("lat", bodies("l", 20)); err != nil {
		t.Fatal(err)
	}
	got := newSink()
	newConsumer(t, d.tcp, "lat", "c", nil, got)
	testutil.WaitFor(t, "20 FINs", 5*time.Second, func() bool {
		cs, _ := d.channelStats("lat", "c")
		return len(cs.Clients) == 1 && cs.Clients[0].FinishCount == 20
	})
	m := d.getJSON("/stats?format=json&topic=lat")
	st := m["topics"].([]any)[0].(map[string]any)
	for what, l := range map[string]any{
		"topic":   st["e2e_processing_latency"],
		"channel": st["channels"].([]any)[0].(map[string]any)["e2e_processing_latency"],
	} {
		lm := l.(map[string]any)
		ps, _ := lm["percentiles"].([]any)
		if lm["count"] != float64(20) || len(ps) != 2 {
			t.Fatalf("%s latency: %v", what, lm)
		}
		for i, q := range []float64{0.5, 0.99} {
			pm := ps[i].(map[string]any)
			if pm["quantile"] != q || pm["value"].(float64) <= 0 {
				t.Fatalf("%s latency percentile %d: %v", what, i, pm)
			}
		}
	}
	text := d.mustDo("GET", "/stats?topic=lat", "", 200)
	if !strings.Contains(text, "e2e%: 50.00%=") || !strings.Contains(text, ", 99.00%=") {
		t.Fatalf("text latency missing:\n%s", text)
	}
}

func TestHTTPStatsText(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	r := d.call("GET", "/stats", nil)
	if r.code != 200 || !strings.Contains(r.body, "\nTopics: None\n") || !strings.Contains(r.body, "\nProducers: None\n") {
		t.Fatalf("empty text stats: %d\n%s", r.code, r.body)
	}
	d.mustDo("POST", "/topic/create?topic=tx", "", 200)
	d.mustDo("POST", "/channel/create?topic=tx&channel=open", "", 200)
	d.mustDo("POST", "/channel/create?topic=tx&channel=shut", "", 200)
	d.mustDo("POST", "/channel/pause?topic=tx&channel=shut", "", 200)
	d.mustDo("POST", "/topic/create?topic=held", "", 200)
	d.mustDo("POST", "/topic/pause?topic=held", "", 200)
	p := newProducer(t, d.tcp)
	if err := p.Publish("tx", []byte("x")); err != nil {
		t.Fatal(err)
	}
	cfg := nsqConfig()
	cfg.UserAgent = "text-test"
	newConsumer(t, d.tcp, "tx", "open", cfg, newSink())
	testutil.WaitFor(t, "consumer on tx/open", 5*time.Second, func() bool {
		cs, _ := d.channelStats("tx", "open")
		return len(cs.Clients) == 1 && cs.Clients[0].FinishCount == 1
	})

	r = d.call("GET", "/stats", nil)
	if r.code != 200 || r.hdr.Get("X-NSQ-Content-Type") != nsqHeader || !strings.HasPrefix(r.hdr.Get("Content-Type"), "text/plain") {
		t.Fatalf("text stats: %d %v", r.code, r.hdr)
	}
	for _, want := range []string{
		"nsqd v" + version.Version + " (built w/",
		"\nstart_time ",
		"\nuptime ",
		"\nHealth: OK\n",
		"\nMemory:\n   heap_objects",
		"   gc_pause_usec_99",
		"\nTopics:\n*P [held           ] depth: 0     be-depth: 0     msgs: 0        e2e%: \n",
		"\n   [tx             ] depth: 0     be-depth: 0     msgs: 1        e2e%: \n",
		"\n      [open                     ] depth: 0     be-depth: 0     inflt: 0    def: 0    re-q: 0     timeout: 0     msgs: 1        e2e%: \n",
		"\n   *P [shut                     ] depth: 1     be-depth: 0     inflt: 0    def: 0    re-q: 0     timeout: 0     msgs: 1        e2e%: \n",
		"\n        [V2 ", // a consumer line under its channel
		" text-test   ] state: 3 inflt: 0    rdy: 1    fin: 1        re-q: 0        msgs: 1        connected: ",
		"\nProducers:\n   [V2 ",
		"] msgs: 1        topics: tx=1 connected: ",
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("text stats lacks %q:\n%s", want, r.body)
		}
	}
	r = d.call("GET", "/stats?include_mem=false&include_clients=false&topic=tx&channel=shut", nil)
	if strings.Contains(r.body, "Memory:") || strings.Contains(r.body, "held") || strings.Contains(r.body, "[open") ||
		strings.Contains(r.body, "text-test") || !strings.Contains(r.body, "Producers: None") {
		t.Fatalf("filtered text stats:\n%s", r.body)
	}
}

func TestHTTPTopicAdmin(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	dir := d.opts.DataPath
	metaTopic := func(name string) (topicMeta, bool) {
		for _, tm := range readMetaFile(t, dir).Topics {
			if tm.Name == name {
				return tm, true
			}
		}
		return topicMeta{}, false
	}

	expectV1(t, "create", d.call("POST", "/topic/create?topic=ta", nil), "")
	// Creates and deletes are persisted in the background (as in NSQ).
	testutil.WaitFor(t, "created topic in nsqd.dat", 5*time.Second, func() bool { _, ok := metaTopic("ta"); return ok })
	expectV1(t, "create again", d.call("POST", "/topic/create?topic=ta", nil), "")
	expectV1(t, "create ephemeral", d.call("POST", "/topic/create?topic=te%23ephemeral", nil), "")
	if _, ok := metaTopic("te#ephemeral"); ok {
		t.Fatal("ephemeral topic written to nsqd.dat")
	}
	expectErr(t, "create no topic", d.call("POST", "/topic/create", nil), 400, "MISSING_ARG_TOPIC")
	expectErr(t, "create bad topic", d.call("POST", "/topic/create?topic=a/b", nil), 400, "INVALID_TOPIC")
	expectErr(t, "create empty topic", d.call("POST", "/topic/create?topic=", nil), 400, "INVALID_TOPIC")

	// pause / unpause: persisted at once.
	expectV1(t, "pause", d.call("POST", "/topic/pause?topic=ta", nil), "")
	if tm, _ := metaTopic("ta"); !tm.Paused {
		t.Fatal("pause not in nsqd.dat right after the response")
	}
	if !d.topicStats("ta").Paused {
		t.Fatal("pause not in stats")
	}
	expectV1(t, "unpause", d.call("POST", "/topic/unpause?topic=ta", nil), "")
	if tm, _ := metaTopic("ta"); tm.Paused {
		t.Fatal("unpause not in nsqd.dat right after the response")
	}
	for _, op := range []string{"pause", "unpause", "empty", "delete"} {
		expectErr(t, op+" no topic", d.call("POST", "/topic/"+op, nil), 400, "MISSING_ARG_TOPIC")
		expectErr(t, op+" unknown topic", d.call("POST", "/topic/"+op+"?topic=nope", nil), 404, "TOPIC_NOT_FOUND")
		expectErr(t, op+" malformed", d.call("POST", "/topic/"+op+"?topic=%zz", nil), 400, "INVALID_REQUEST")
		expectErr(t, op+" GET", d.call("GET", "/topic/"+op+"?topic=ta", nil), 405, "METHOD_NOT_ALLOWED")
	}
	// Only empty validates the name; delete and pause just look it up.
	expectErr(t, "empty bad name", d.call("POST", "/topic/empty?topic=a!", nil), 400, "INVALID_TOPIC")
	expectErr(t, "delete bad name", d.call("POST", "/topic/delete?topic=a!", nil), 404, "TOPIC_NOT_FOUND")
	expectErr(t, "pause bad name", d.call("POST", "/topic/pause?topic=a!", nil), 404, "TOPIC_NOT_FOUND")

	// empty drops the topic's own backlog, memory and disk.
	o := d.opts
	for i := 0; i < int(o.MemQueueSize)+5; i += 1000 {
		if r := d.call("POST", "/mpub?topic=ta", strings.Repeat("msg\n", 1000)); r.code != 200 {
			t.Fatalf("mpub: %d %s", r.code, r.body)
		}
	}
	if ts := d.topicStats("ta"); ts.Depth <= o.MemQueueSize || ts.BackendDepth == 0 {
		t.Fatalf("before empty: depth %d backend %d", ts.Depth, ts.BackendDepth)
	}
	expectV1(t, "empty", d.call("POST", "/topic/empty?topic=ta", nil), "")
	if ts := d.topicStats("ta"); ts.Depth != 0 || ts.BackendDepth != 0 {
		t.Fatalf("after empty: depth %d backend %d", ts.Depth, ts.BackendDepth)
	}

	// delete removes topic, its channels, files and metadata.
	d.mustDo("POST", "/channel/create?topic=ta&channel=c", "", 200)
	d.mustDo("POST", "/pub?topic=ta", "x", 200)
	expectV1(t, "delete", d.call("POST", "/topic/delete?topic=ta", nil), "")
	if _, ok := d.GetExistingTopic("ta"); ok {
		t.Fatal("deleted topic still exists")
	}
	testutil.WaitFor(t, "deleted topic gone from nsqd.dat", 5*time.Second, func() bool { _, ok := metaTopic("ta"); return !ok })
	expectErr(t, "delete again", d.call("POST", "/topic/delete?topic=ta", nil), 404, "TOPIC_NOT_FOUND")
	expectV1(t, "delete ephemeral", d.call("POST", "/topic/delete?topic=te%23ephemeral", nil), "")
}

func TestHTTPChannelAdmin(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	dir := d.opts.DataPath
	metaChannel := func(topic, ch string) (channelMeta, bool) {
		for _, tm := range readMetaFile(t, dir).Topics {
			for _, cm := range tm.Channels {
				if tm.Name == topic && cm.Name == ch {
					return cm, true
				}
			}
		}
		return channelMeta{}, false
	}
	expectErr(t, "create on unknown topic", d.call("POST", "/channel/create?topic=ct&channel=c", nil), 404, "TOPIC_NOT_FOUND")
	if _, ok := d.GetExistingTopic("ct"); ok {
		t.Fatal("/channel/create created the topic")
	}
	d.mustDo("POST", "/topic/create?topic=ct", "", 200)
	expectV1(t, "create", d.call("POST", "/channel/create?topic=ct&channel=c", nil), "")
	testutil.WaitFor(t, "created channel in nsqd.dat", 5*time.Second, func() bool { _, ok := metaChannel("ct", "c"); return ok })
	expectV1(t, "create ephemeral", d.call("POST", "/channel/create?topic=ct&channel=e%23ephemeral", nil), "")
	if _, ok := metaChannel("ct", "e#ephemeral"); ok {
		t.Fatal("ephemeral channel in nsqd.dat")
	}

	for _, op := range []string{"create", "delete", "empty", "pause", "unpause"} {
		for _, c := range []struct {
			query string
			code  int
			text  string
		}{
			{"", 400, "MISSING_ARG_TOPIC"},
			{"?channel=c", 400, "MISSING_ARG_TOPIC"},
			{"?topic=", 400, "INVALID_ARG_TOPIC"},
			{"?topic=b!&channel=c", 400, "INVALID_ARG_TOPIC"},
			{"?topic=ct", 400, "MISSING_ARG_CHANNEL"},
			{"?topic=ct&channel=", 400, "INVALID_ARG_CHANNEL"},
			{"?topic=ct&channel=b!", 400, "INVALID_ARG_CHANNEL"},
			{"?topic=nope&channel=c", 404, "TOPIC_NOT_FOUND"},
			{"?topic=ct&channel=%zz", 400, "INVALID_REQUEST"},
		} {
			expectErr(t, op+c.query, d.call("POST", "/channel/"+op+c.query, nil), c.code, c.text)
		}
		if op != "create" {
			expectErr(t, op+" unknown channel", d.call("POST", "/channel/"+op+"?topic=ct&channel=nope", nil), 404, "CHANNEL_NOT_FOUND")
		}
		expectErr(t, op+" GET", d.call("GET", "/channel/"+op+"?topic=ct&channel=c", nil), 405, "METHOD_NOT_ALLOWED")
	}

	// pause / unpause persist at once and stop / resume delivery.
	expectV1(t, "pause", d.call("POST", "/channel/pause?topic=ct&channel=c", nil), "")
	if cm, _ := metaChannel("ct", "c"); !cm.Paused {
		t.Fatal("channel pause not in nsqd.dat right after the response")
	}
	d.mustDo("POST", "/mpub?topic=ct", "1\n2\n3\n", 200)
	got := newSink()
	newConsumer(t, d.tcp, "ct", "c", nil, got)
	testutil.WaitFor(t, "consumer ready on paused channel", 5*time.Second, func() bool {
		cs, _ := d.channelStats("ct", "c")
		return len(cs.Clients) == 1 && cs.Clients[0].ReadyCount > 0
	})
	if cs, _ := d.channelStats("ct", "c"); !cs.Paused || cs.Depth != 3 || got.received() != 0 {
		t.Fatalf("paused channel: paused %v depth %d delivered %d", cs.Paused, cs.Depth, got.received())
	}
	expectV1(t, "unpause", d.call("POST", "/channel/unpause?topic=ct&channel=c", nil), "")
	if cm, _ := metaChannel("ct", "c"); cm.Paused {
		t.Fatal("channel unpause not in nsqd.dat right after the response")
	}
	testutil.WaitFor(t, "delivery after unpause", 5*time.Second, func() bool { return got.has([]string{"1", "2", "3"}) })

	// empty drops queued, in-flight and deferred messages.
	d.mustDo("POST", "/channel/create?topic=ct&channel=q", "", 200)
	d.mustDo("POST", "/mpub?topic=ct", "4\n5\n", 200)
	d.mustDo("POST", "/pub?topic=ct&defer=60000", "6", 200)
	testutil.WaitFor(t, "messages on ct/q", 5*time.Second, func() bool {
		cs, _ := d.channelStats("ct", "q")
		return cs.Depth == 2 && cs.DeferredCount == 1
	})
	expectV1(t, "empty", d.call("POST", "/channel/empty?topic=ct&channel=q", nil), "")
	if cs, _ := d.channelStats("ct", "q"); cs.Depth != 0 || cs.DeferredCount != 0 || cs.InFlightCount != 0 {
		t.Fatalf("after empty: %+v", cs)
	}

	// delete.
	expectV1(t, "delete", d.call("POST", "/channel/delete?topic=ct&channel=q", nil), "")
	if _, ok := d.channelStats("ct", "q"); ok {
		t.Fatal("deleted channel still exists")
	}
	testutil.WaitFor(t, "deleted channel gone from nsqd.dat", 5*time.Second, func() bool { _, ok := metaChannel("ct", "q"); return !ok })
	expectErr(t, "delete again", d.call("POST", "/channel/delete?topic=ct&channel=q", nil), 404, "CHANNEL_NOT_FOUND")
}

// TestHTTPConfigResolved: the options NSQ v1.3.0 resolves at start-up
// answer GET /config with what it resolved them to: the bound ports for
// broadcast ports left at 0, the statsd prefix with its %s expanded, and
// [] rather than null for no lookupd addresses.
func TestHTTPConfigResolved(t *testing.T) {
	o := testOptions(t)
	o.BroadcastAddress = "node-1.example"
	d := startDaemon(t, o)
	_, tcpPort, _ := net.SplitHostPort(d.tcp)
	_, httpPort, _ := net.SplitHostPort(d.http)
	for opt, want := range map[string]string{
		"nsqlookupd_tcp_addresses": "[]",
		"broadcast_tcp_port":       tcpPort,
		"broadcast_http_port":      httpPort,
		"statsd_prefix":            "nsq.node-1_example_" + httpPort + ".",
	} {
		if r := d.call("GET", "/config/"+opt, nil); r.code != 200 || r.body != want {
			t.Errorf("GET /config/%s = %d %q, want %q", opt, r.code, r.body, want)
		}
	}
}

func TestHTTPConfig(t *testing.T) {
	o := testOptions(t)
	o.MaxMsgSize = 4096
	o.MemQueueSize = 1234
	o.NSQLookupdTCPAddresses = []string{"127.0.0.1:1"} // refused at once
	d := startDaemon(t, o)
	get := func(opt string) string {
		t.Helper()
		r := d.call("GET", "/config/"+opt, nil)
		if r.code != 200 || r.hdr.Get("X-NSQ-Content-Type") != nsqHeader {
			t.Fatalf("GET /config/%s: %d %s", opt, r.code, r.body)
		}
		return r.body
	}
	for opt, want := range map[string]string{
		"max_msg_size":             "4096",
		"mem_queue_size":           "1234",
		"msg_timeout":              "60000000000", // durations in ns
		"log_level":                "3",           // NSQ's number for warn
		"nsqlookupd_tcp_addresses": `["127.0.0.1:1"]`,
		"snappy":                   "true",
		"id":                       strconv.FormatInt(o.ID, 10),
		"data_path":                o.DataPath, // a string is sent raw, as NSQ's V1 does
	} {
		if got := get(opt); got != want {
			t.Errorf("GET /config/%s = %q, want %q", opt, got, want)
		}
	}
	for _, opt := range []string{"nope", "node_id", "logger", "QueueScanInterval", "-"} {
		expectErr(t, "GET "+opt, d.call("GET", "/config/"+opt, nil), 400, "INVALID_OPTION")
	}

	r := d.call("PUT", "/config/log_level", "debug")
	if r.code != 200 || r.body != "1" || d.logLevel.Level() != slog.LevelDebug {
		t.Fatalf("PUT log_level debug: %d %q level %v", r.code, r.body, d.logLevel.Level())
	}
	if got := get("log_level"); got != "1" {
		t.Fatalf("log_level after PUT: %s", got)
	}
	r = d.call("PUT", "/config/log_level", "WARN")
	if r.code != 200 || r.body != "3" || d.logLevel.Level() != slog.LevelWarn {
		t.Fatalf("PUT log_level WARN: %d %q", r.code, r.body)
	}
	expectErr(t, "PUT bad level", d.call("PUT", "/config/log_level", "loud"), 400, "INVALID_VALUE")
	expectErr(t, "PUT empty", d.call("PUT", "/config/log_level", ""), 413, "INVALID_VALUE")
	expectErr(t, "PUT too long", d.call("PUT", "/config/log_level", strings.Repeat("d", 4097)), 413, "INVALID_VALUE")
	expectErr(t, "PUT unsupported option", d.call("PUT", "/config/max_msg_size", "10"), 400, "INVALID_OPTION")
	expectErr(t, "PUT unknown option", d.call("PUT", "/config/nope", "10"), 400, "INVALID_OPTION")
	expectErr(t, "PUT unknown option, empty", d.call("PUT", "/config/nope", ""), 413, "INVALID_VALUE")
	addrs := `["127.0.0.1:2","127.0.0.1:3"]`
	r = d.call("PUT", "/config/nsqlookupd_tcp_addresses", addrs)
	if r.code != 200 || r.body != addrs || !strings.HasPrefix(r.hdr.Get("Content-Type"), "application/json") {
		t.Fatalf("PUT nsqlookupd_tcp_addresses: %d %q", r.code, r.body)
	}
	if got := get("nsqlookupd_tcp_addresses"); got != addrs {
		t.Fatalf("nsqlookupd_tcp_addresses after PUT: %s", got)
	}
	expectErr(t, "PUT bad addresses", d.call("PUT", "/config/nsqlookupd_tcp_addresses", "10.0.0.1:4160"), 400, "INVALID_VALUE")
	expectErr(t, "POST config", d.call("POST", "/config/log_level", "debug"), 405, "METHOD_NOT_ALLOWED")
}

func TestHTTPDebug(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap", "/debug/pprof/goroutine?debug=1",
		"/debug/pprof/block", "/debug/pprof/threadcreate", "/debug/pprof/symbol"} {
		if r := d.call("GET", p, nil); r.code != 200 || r.body == "" {
			t.Errorf("GET %s: %d", p, r.code)
		}
	}
	if r := d.call("POST", "/debug/pprof/symbol", "0x0"); r.code != 200 {
		t.Errorf("POST /debug/pprof/symbol: %d", r.code)
	}
	// NSQ answers 500 here although it did the work; we answer 200 OK (§K).
	if r := d.call("POST", "/debug/freememory", nil); r.code != 200 || r.body != "OK" {
		t.Fatalf("freememory: %d %q", r.code, r.body)
	}
	if r := d.call("PUT", "/debug/setblockrate?rate=0", nil); r.code != 200 || r.body != "OK" {
		t.Fatalf("setblockrate: %d %q", r.code, r.body)
	}
	if r := d.call("PUT", "/debug/setblockrate?rate=x", nil); r.code != 400 || !strings.HasPrefix(r.body, "invalid block rate") {
		t.Fatalf("setblockrate bad rate: %d %q", r.code, r.body)
	}
	expectErr(t, "GET freememory", d.call("GET", "/debug/freememory", nil), 405, "METHOD_NOT_ALLOWED")
}

// Publishing over HTTP (HTTPS in the TLS modes) does not make the caller a
// "producer" (that list is TCP clients), but it must reach TCP consumers
// like any publish.
func TestHTTPPubReachesConsumers(t *testing.T) { forEachTransport(t, nil, testHTTPPubReachesConsumers) }

func testHTTPPubReachesConsumers(t *testing.T, r *rig) {
	d := r.d
	got := newSink()
	newConsumer(t, r.addr, "hp", "c", r.config(1), got)
	testutil.WaitFor(t, "subscription", 5*time.Second, func() bool { _, ok := d.channelStats("hp", "c"); return ok })
	r.call(t, "POST", "/pub?topic=hp", "one")
	r.call(t, "POST", "/mpub?topic=hp", "two\nthree")
	testutil.WaitFor(t, "3 messages", 5*time.Second, func() bool { return got.has([]string{"one", "two", "three"}) })
	var stats map[string]any
	if err := json.Unmarshal(r.call(t, "GET", "/stats?format=json", ""), &stats); err != nil {
		t.Fatalf("/stats: %v", err)
	}
	if stats["producers"] != nil {
		t.Fatalf("HTTP publishes listed as producers: %v", stats["producers"])
	}
	var _ nsq.Handler = got
}

// TestHTTPRedirectsAsNSQ: a path that differs from a route by a trailing
// slash or by case is redirected to the route, as NSQ's router does.
func TestHTTPRedirectsAsNSQ(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		method, path string
		code         int
		location     string
	}{
		{"GET", "/ping/", http.StatusMovedPermanently, "/ping"},
		{"GET", "/STATS", http.StatusMovedPermanently, "/stats"},
		{"POST", "/pub/?topic=t", http.StatusTemporaryRedirect, "/pub?topic=t"},
	} {
		req, _ := http.NewRequest(tc.method, d.url(tc.path), nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code || resp.Header.Get("Location") != tc.location {
			t.Errorf("%s %s: %d to %q, want %d to %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Location"), tc.code, tc.location)
		}
	}
}
