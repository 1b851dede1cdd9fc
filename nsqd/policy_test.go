package nsqd

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
)

// Queue policies, end to end: real daemons, go-nsq and raw
// sockets.

// policyBody is the i-th body of a test: fixed width, so that max_bytes
// maps to a message count.
func policyBody(i int) string { return fmt.Sprintf("m%07d", i) }

func policyBodies(from, to int) [][]byte {
	out := make([][]byte, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, []byte(policyBody(i)))
	}
	return out
}

func policyStrings(from, to int) []string {
	out := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, policyBody(i))
	}
	return out
}

// publishInBatches publishes bodies from..to-1 in order, in MPUBs of 100.
func publishInBatches(t *testing.T, p *nsq.Producer, topic string, from, to int) {
	t.Helper()
	for i := from; i < to; i += 100 {
		if err := p.MultiPublish(topic, policyBodies(i, min(i+100, to))); err != nil {
			t.Fatalf("MPUB %d: %v", i, err)
		}
	}
}

// orderedSink records bodies in arrival order (go-nsq runs one handler
// goroutine, so arrival order is delivery order).
type orderedSink struct {
	mu     sync.Mutex
	bodies []string
}

func (s *orderedSink) HandleMessage(m *nsq.Message) error {
	s.mu.Lock()
	s.bodies = append(s.bodies, string(m.Body))
	s.mu.Unlock()
	return nil
}

func (s *orderedSink) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.bodies)
}

// consumeExactly subscribes and waits for want, in order, then checks
// that the channel has nothing more to give.
func (d *testDaemon) consumeExactly(topic, channel string, want []string) {
	d.t.Helper()
	cfg := nsqConfig()
	cfg.MaxInFlight = 50
	s := &orderedSink{}
	newConsumer(d.t, d.tcp, topic, channel, cfg, s)
	testutil.WaitFor(d.t, fmt.Sprintf("%d messages on %s/%s", len(want), topic, channel), 10*time.Second,
		func() bool { return len(s.got()) >= len(want) })
	testutil.WaitFor(d.t, "channel drained and acknowledged", 10*time.Second, func() bool {
		cs, ok := d.channelStats(topic, channel)
		return ok && cs.Depth == 0 && cs.InFlightCount == 0
	})
	if got := s.got(); !slices.Equal(got, want) {
		d.t.Fatalf("consumer got %d messages %v … , want %d: %v …", len(got), head(got), len(want), head(want))
	}
}

func head(s []string) []string { return s[:min(5, len(s))] }

func (d *testDaemon) postPolicy(path, body string) map[string]any {
	d.t.Helper()
	var out map[string]any
	if err := json.Unmarshal([]byte(d.mustDo("POST", path, body, http.StatusOK)), &out); err != nil {
		d.t.Fatal(err)
	}
	return out
}

// TestPolicyDropOldest: a drop_oldest cap set over HTTP keeps a channel
// to its newest messages, which go-nsq then receives in order; the caps in
// memory and on disk, by count and by bytes, are the unit tests'
// (TestUnitPolicyDropOldest).
func TestPolicyDropOldest(t *testing.T) {
	o := testOptions(t)
	o.MemQueueSize = 10
	o.MaxBytesPerFile = 4096 // several segments
	d := startDaemon(t, o)
	d.mustDo("POST", "/channel/create?topic=orders&channel=archive", "", http.StatusNotFound)
	d.mustDo("POST", "/topic/create?topic=orders", "", http.StatusOK)
	d.mustDo("POST", "/channel/create?topic=orders&channel=archive", "", http.StatusOK)
	d.postPolicy("/channel/policy?topic=orders&channel=archive", `{"max_msgs":100,"overflow":"drop_oldest"}`)

	publishInBatches(t, newProducer(t, d.tcp), "orders", 0, 1000)
	cs, _ := d.channelStats("orders", "archive")
	if cs.Depth != 100 || cs.DroppedCount != 900 {
		t.Fatalf("depth %d dropped %d, want 100 and 900", cs.Depth, cs.DroppedCount)
	}
	d.consumeExactly("orders", "archive", policyStrings(900, 1000))
}

func TestPolicyDropOldestTopicBacklog(t *testing.T) {
	o := testOptions(t)
	o.MemQueueSize = 10
	d := startDaemon(t, o)
	d.mustDo("POST", "/topic/create?topic=orders", "", http.StatusOK)
	got := d.postPolicy("/topic/policy?topic=orders", `{"max_msgs":100}`)
	if got["max_msgs"] != 100.0 || got["overflow"] != "drop_oldest" || got["max_age"] != "0s" {
		t.Fatalf("POST answer %v", got)
	}
	publishInBatches(t, newProducer(t, d.tcp), "orders", 0, 1000)
	ts := d.topicStats("orders")
	if ts.Depth != 100 || ts.DroppedCount != 900 {
		t.Fatalf("topic depth %d dropped %d, want 100 and 900", ts.Depth, ts.DroppedCount)
	}
	d.consumeExactly("orders", "first", policyStrings(900, 1000))
}

// TestPolicyAcrossRestart: the policy and the capped backlog survive a
// restart (memory written at shutdown, disk as it is), and the cap still
// holds for what is published after.
func TestPolicyAcrossRestart(t *testing.T) {
	for _, tc := range []struct {
		policy   string
		memQueue int64
	}{
		{`{"max_msgs":100}`, 10000},
		{`{"max_msgs":100}`, 10},
		{`{"max_bytes":800}`, 10}, // the restored disk backlog's bytes are measured
	} {
		t.Run(fmt.Sprintf("%s mem-queue-size=%d", tc.policy, tc.memQueue), func(t *testing.T) {
			o := testOptions(t)
			o.MemQueueSize = tc.memQueue
			d := startDaemon(t, o)
			d.mustDo("POST", "/topic/create?topic=orders", "", http.StatusOK)
			d.mustDo("POST", "/channel/create?topic=orders&channel=archive", "", http.StatusOK)
			d.postPolicy("/channel/policy?topic=orders&channel=archive", tc.policy)
			p := newProducer(t, d.tcp)
			publishInBatches(t, p, "orders", 0, 1000)
			p.Stop()
			d.stop()

			d = startDaemon(t, o)
			var pol ChannelPolicy
			if err := json.Unmarshal([]byte(d.mustDo("GET", "/channel/policy?topic=orders&channel=archive", "", 200)), &pol); err != nil {
				t.Fatal(err)
			}
			if pol.MaxMsgs != 100 && pol.MaxBytes != 800 {
				t.Fatalf("policy after restart: %+v", pol)
			}
			publishInBatches(t, newProducer(t, d.tcp), "orders", 1000, 1010)
			cs, _ := d.channelStats("orders", "archive")
			if cs.Depth != 100 {
				t.Fatalf("depth after restart and 10 more: %d, want 100", cs.Depth)
			}
			d.consumeExactly("orders", "archive", policyStrings(910, 1010))
		})
	}
}

func TestPolicyRejectNew(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	d.mustDo("POST", "/topic/create?topic=orders", "", http.StatusOK)
	d.mustDo("POST", "/channel/create?topic=orders&channel=capped", "", http.StatusOK)
	d.mustDo("POST", "/channel/create?topic=orders&channel=free", "", http.StatusOK)
	d.postPolicy("/channel/policy?topic=orders&channel=capped", `{"max_msgs":100,"overflow":"reject_new"}`)

	c := dialV2(t, d.tcp)
	for i := 0; i < 98; i++ {
		c.send("PUB orders", []byte(policyBody(i)))
		c.expect(0, "OK")
	}
	// 98 in: an MPUB of 3 does not fit and leaves nothing anywhere.
	c.send("MPUB orders", mpubBodyBytes(policyBodies(98, 101)))
	c.expectFatal("E_MPUB_FAILED MPUB failed queue full: channel orders/capped has max_msgs=100")
	for _, ch := range []string{"capped", "free"} {
		if cs, _ := d.channelStats("orders", ch); cs.Depth != 98 {
			t.Fatalf("%s: depth %d after a refused MPUB, want 98", ch, cs.Depth)
		}
	}
	c = dialV2(t, d.tcp)
	c.send("MPUB orders", mpubBodyBytes(policyBodies(98, 100)))
	c.expect(0, "OK")
	c.send("PUB orders", []byte(policyBody(100)))
	c.expectFatal("E_PUB_FAILED PUB failed queue full: channel orders/capped has max_msgs=100")
	c = dialV2(t, d.tcp)
	c.send("DPUB orders 1000", []byte(policyBody(100)))
	c.expectFatal("E_DPUB_FAILED DPUB failed queue full: channel orders/capped has max_msgs=100")
	code, body := d.do("POST", "/pub?topic=orders", policyBody(100))
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "QUEUE_FULL") {
		t.Fatalf("HTTP /pub into a full queue: %d %s", code, body)
	}
	code, body = d.do("POST", "/mpub?topic=orders", policyBody(100)+"\n"+policyBody(101))
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "QUEUE_FULL") {
		t.Fatalf("HTTP /mpub into a full queue: %d %s", code, body)
	}
	if err := d.Health(); err != nil {
		t.Fatalf("a full queue made the daemon unhealthy: %v", err)
	}

	// Everything acknowledged is there, in order; once drained, publishing works again.
	d.consumeExactly("orders", "capped", policyStrings(0, 100))
	d.mustDo("POST", "/pub?topic=orders", policyBody(100), http.StatusOK)
	if cs, _ := d.channelStats("orders", "free"); cs.Depth != 101 || cs.DroppedCount != 0 {
		t.Fatalf("free channel: depth %d dropped %d, want 101 and 0", cs.Depth, cs.DroppedCount)
	}
}

// TestPolicyRejectNewConcurrent: publishers racing for the last room never
// push a reject_new queue past its cap.
func TestPolicyRejectNewConcurrent(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	d.mustDo("POST", "/topic/create?topic=orders", "", http.StatusOK)
	d.mustDo("POST", "/channel/create?topic=orders&channel=capped", "", http.StatusOK)
	d.postPolicy("/channel/policy?topic=orders&channel=capped", `{"max_msgs":500,"overflow":"reject_new"}`)
	tp, _ := d.GetExistingTopic("orders")
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				_ = d.publish(tp, policyBodies(i, i+3), 0)
			}
		}()
	}
	wg.Wait()
	cs, _ := d.channelStats("orders", "capped")
	if cs.Depth > 500 || cs.Depth < 498 {
		t.Fatalf("depth %d after racing publishers, want 498..500", cs.Depth)
	}
}

// TestPolicyTopicRejectNew: the topic's own backlog refuses when full.
func TestPolicyTopicRejectNew(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	d.mustDo("POST", "/topic/create?topic=orders", "", http.StatusOK)
	d.postPolicy("/topic/policy?topic=orders", `{"max_bytes":80,"overflow":"reject_new"}`)
	for i := 0; i < 10; i++ {
		d.mustDo("POST", "/pub?topic=orders", policyBody(i), http.StatusOK)
	}
	code, body := d.do("POST", "/pub?topic=orders", policyBody(10))
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "QUEUE_FULL") {
		t.Fatalf("11th publish into an 80-byte topic: %d %s", code, body)
	}
	d.consumeExactly("orders", "c", policyStrings(0, 10))
}

// TestPolicyMaxAge: the daemon's sweep drops expired messages without a
// consumer, from a channel and from a topic's own backlog; what is
// published after is delivered. That nothing expires a nanosecond early,
// at delivery or in the sweep, is the unit tests' (TestUnitPolicyMaxAge*).
func TestPolicyMaxAge(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	d.mustDo("POST", "/topic/create?topic=events", "", http.StatusOK)
	d.mustDo("POST", "/channel/create?topic=events&channel=c", "", http.StatusOK)
	d.postPolicy("/channel/policy?topic=events&channel=c", `{"max_age":"100ms"}`)
	d.mustDo("POST", "/topic/create?topic=held", "", http.StatusOK)
	d.postPolicy("/topic/policy?topic=held", `{"max_age":"100ms"}`)
	p := newProducer(t, d.tcp)
	publishInBatches(t, p, "events", 0, 50)
	publishInBatches(t, p, "held", 0, 10)
	testutil.WaitFor(t, "the channel's and the topic's messages expired by the sweep", 10*time.Second, func() bool {
		cs, _ := d.channelStats("events", "c")
		ts := d.topicStats("held")
		return cs.ExpiredCount == 50 && cs.Depth == 0 && ts.ExpiredCount == 10 && ts.Depth == 0
	})
	publishInBatches(t, p, "events", 50, 60)
	d.consumeExactly("events", "c", policyStrings(50, 60))
}

func queueDiskUsage(t *testing.T, dir, name string) int64 {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, name+".diskqueue.*.dat"))
	var total int64
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			total += fi.Size()
		}
	}
	return total
}

// countingSink is a sink that can also REQ every message.
type countingSink struct {
	*sink
	requeue bool
}

func (s *countingSink) HandleMessage(m *nsq.Message) error {
	_ = s.sink.HandleMessage(m)
	if s.requeue {
		return fmt.Errorf("requeue")
	}
	return nil
}

func (s *countingSink) snapshot() (map[string]int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.counts), s.total
}

// jobs creates the channel jobs/work with the channel policy and
// publishes bodies 0..n-1 to it.
func (d *testDaemon) jobs(policy string, n int) {
	d.t.Helper()
	d.mustDo("POST", "/topic/create?topic=jobs", "", http.StatusOK)
	d.mustDo("POST", "/channel/create?topic=jobs&channel=work", "", http.StatusOK)
	d.postPolicy("/channel/policy?topic=jobs&channel=work", policy)
	publishInBatches(d.t, newProducer(d.t, d.tcp), "jobs", 0, n)
}

// TestPolicyMaxAttempts: go-nsq consumers that always REQ see each
// message max_attempts times, then the daemon publishes it to the
// dead-letter topic, where a consumer gets it once. Timeouts, no
// dead-letter topic and the exact moment each message leaves are the unit
// tests' (TestUnitPolicyMaxAttempts).
func TestPolicyMaxAttempts(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	const n = 20
	d.jobs(`{"max_attempts":3,"dead_letter_topic":"dlq"}`, n)

	cfg := nsqConfig()
	cfg.MaxInFlight = n
	cfg.DefaultRequeueDelay = 10 * time.Millisecond // REQs are deferred
	cfg.MaxBackoffDuration = 0
	cfg.MaxAttempts = 0
	s := &countingSink{sink: newSink(), requeue: true}
	newConsumer(t, d.tcp, "jobs", "work", cfg, s)
	testutil.WaitFor(t, "every message out of attempts", 20*time.Second, func() bool {
		cs, _ := d.channelStats("jobs", "work")
		return cs.DeadLetterCount == n
	})
	counts, total := s.snapshot()
	cs, _ := d.channelStats("jobs", "work")
	if total != 3*n || len(counts) != n || cs.Depth != 0 || cs.DeferredCount != 0 || cs.InFlightCount != 0 {
		t.Fatalf("%d deliveries of %d bodies (want %d of %d); channel depth %d deferred %d in flight %d",
			total, len(counts), 3*n, n, cs.Depth, cs.DeferredCount, cs.InFlightCount)
	}
	for b, c := range counts {
		if c != 3 {
			t.Fatalf("%s delivered %d times, want 3", b, c)
		}
	}
	dl := &countingSink{sink: newSink()}
	dlCfg := nsqConfig()
	dlCfg.MaxInFlight = n
	newConsumer(t, d.tcp, "dlq", "inspect", dlCfg, dl)
	testutil.WaitFor(t, "every message on the dead-letter topic", 10*time.Second, func() bool {
		_, total := dl.snapshot()
		return total >= n
	})
	dead, _ := dl.snapshot()
	for _, b := range policyStrings(0, n) {
		if dead[b] != 1 {
			t.Fatalf("%s on the dead-letter topic %d times, want 1 (all: %v)", b, dead[b], dead)
		}
	}
}

func TestPolicyBadInput(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	d.mustDo("POST", "/topic/create?topic=orders", "", http.StatusOK)
	d.mustDo("POST", "/channel/create?topic=orders&channel=c", "", http.StatusOK)
	d.postPolicy("/channel/policy?topic=orders&channel=c", `{"max_msgs":7,"max_attempts":2}`)
	beforeTopic := d.mustDo("GET", "/topic/policy?topic=orders", "", http.StatusOK)
	beforeChannel := d.mustDo("GET", "/channel/policy?topic=orders&channel=c", "", http.StatusOK)
	for _, tc := range []struct{ path, body, field string }{
		{"/topic/policy?topic=orders", `{"max_msg":1}`, "max_msg"},
		{"/topic/policy?topic=orders", `{"max_msgs":"1"}`, "max_msgs"},
		{"/topic/policy?topic=orders", `{"max_msgs":1.5}`, "max_msgs"},
		{"/topic/policy?topic=orders", `{"max_bytes":-1}`, "max_bytes"},
		{"/topic/policy?topic=orders", `{"overflow":"drop_newest"}`, "overflow"},
		{"/topic/policy?topic=orders", `{"max_age":"soon"}`, "max_age"},
		{"/topic/policy?topic=orders", `{"max_age":90}`, "max_age"},
		{"/topic/policy?topic=orders", `{"max_attempts":3}`, "max_attempts"},
		{"/topic/policy?topic=orders", `{"max_msgs":5,"overflow":1}`, "overflow"},
		{"/topic/policy?topic=orders", `[1]`, "JSON object"},
		{"/channel/policy?topic=orders&channel=c", `{"max_attempts":-3}`, "max_attempts"},
		{"/channel/policy?topic=orders&channel=c", `{"dead_letter_topic":"bad topic!"}`, "dead_letter_topic"},
		{"/channel/policy?topic=orders&channel=c", `{"dead_letter_topic":"orders"}`, "dead_letter_topic"},
		{"/channel/policy?topic=orders&channel=c", `{"max_msgs":1,"bogus":true}`, "bogus"},
	} {
		code, body := d.do("POST", tc.path, tc.body)
		if code != http.StatusBadRequest || !strings.Contains(body, "INVALID_POLICY") || !strings.Contains(body, tc.field) {
			t.Errorf("POST %s %s: %d %s, want 400 INVALID_POLICY naming %s", tc.path, tc.body, code, body, tc.field)
		}
	}
	if got := d.mustDo("GET", "/topic/policy?topic=orders", "", http.StatusOK); got != beforeTopic {
		t.Errorf("topic policy changed by bad input: %s -> %s", beforeTopic, got)
	}
	if got := d.mustDo("GET", "/channel/policy?topic=orders&channel=c", "", http.StatusOK); got != beforeChannel {
		t.Errorf("channel policy changed by bad input: %s -> %s", beforeChannel, got)
	}
	d.mustDo("GET", "/topic/policy?topic=nope", "", http.StatusNotFound)
	d.mustDo("POST", "/topic/policy?topic=nope", `{"max_msgs":1}`, http.StatusNotFound)
	d.mustDo("GET", "/channel/policy?topic=orders&channel=nope", "", http.StatusNotFound)
	d.mustDo("POST", "/channel/policy?topic=nope&channel=c", `{}`, http.StatusNotFound)
}

func TestPolicyAPIShapeAndInheritance(t *testing.T) {
	o := testOptions(t)
	o.QueueMaxAge = time.Hour
	o.ChannelMaxAttempts = 5
	o.ChannelDeadLetterTopic = "dead"
	d := startDaemon(t, o)
	d.mustDo("POST", "/topic/create?topic=orders", "", http.StatusOK)
	d.mustDo("POST", "/channel/create?topic=orders&channel=c", "", http.StatusOK)
	if got := d.mustDo("GET", "/topic/policy?topic=orders", "", 200); got != `{"max_msgs":0,"max_bytes":0,"overflow":"drop_oldest","max_age":"1h0m0s"}` {
		t.Fatalf("GET /topic/policy: %s", got)
	}
	d.postPolicy("/topic/policy?topic=orders", `{"max_msgs":50,"overflow":"reject_new"}`)
	got := d.postPolicy("/channel/policy?topic=orders&channel=c", `{"max_msgs":10}`)
	want := map[string]any{"max_msgs": 10.0, "max_bytes": 0.0, "overflow": "reject_new", "max_age": "1h0m0s",
		"max_attempts": 5.0, "dead_letter_topic": "dead"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("channel policy %v, want %v", got, want)
	}
	// null gives a field back to the topic.
	got = d.postPolicy("/channel/policy?topic=orders&channel=c", `{"max_msgs":null}`)
	if got["max_msgs"] != 50.0 {
		t.Fatalf("after null: %v", got)
	}

	// /stats shows policies, and counters once they count; text shows
	// non-default ones.
	var st struct {
		Topics []struct {
			Policy   map[string]any `json:"policy"`
			Dropped  *uint64        `json:"dropped_count"`
			Expired  *uint64        `json:"expired_count"`
			Channels []struct {
				Policy     map[string]any `json:"policy"`
				DeadLetter *uint64        `json:"dead_letter_count"`
			} `json:"channels"`
		} `json:"topics"`
	}
	if err := json.Unmarshal([]byte(d.mustDo("GET", "/stats?format=json&topic=orders", "", 200)), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Topics) != 1 || st.Topics[0].Policy["max_msgs"] != 50.0 || st.Topics[0].Dropped != nil ||
		st.Topics[0].Expired != nil || len(st.Topics[0].Channels) != 1 ||
		st.Topics[0].Channels[0].Policy["max_attempts"] != 5.0 || st.Topics[0].Channels[0].DeadLetter != nil {
		t.Fatalf("stats JSON: %+v", st)
	}
	text := d.mustDo("GET", "/stats", "", 200)
	if !strings.Contains(text, "policy: max_msgs=50 overflow=reject_new max_age=1h0m0s") ||
		!strings.Contains(text, "max_attempts=5 dead_letter_topic=dead") {
		t.Fatalf("stats text lacks the policies:\n%s", text)
	}

	// A deleted and re-created topic starts from the defaults.
	d.mustDo("POST", "/topic/delete?topic=orders", "", 200)
	d.mustDo("POST", "/topic/create?topic=orders", "", 200)
	d.mustDo("POST", "/channel/create?topic=orders&channel=c", "", http.StatusOK)
	if got := d.mustDo("GET", "/topic/policy?topic=orders", "", 200); !strings.Contains(got, `"max_msgs":0`) {
		t.Fatalf("re-created topic: %s", got)
	}
	if got := d.mustDo("GET", "/channel/policy?topic=orders&channel=c", "", 200); !strings.Contains(got, `"max_msgs":0`) {
		t.Fatalf("re-created channel: %s", got)
	}
}

func TestPolicyMetrics(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	d.mustDo("POST", "/topic/create?topic=orders", "", 200)
	d.mustDo("POST", "/channel/create?topic=orders&channel=c", "", 200)
	d.postPolicy("/channel/policy?topic=orders&channel=c", `{"max_msgs":1}`)
	publishInBatches(t, newProducer(t, d.tcp), "orders", 0, 5)
	m := d.mustDo("GET", "/metrics", "", 200)
	for _, want := range []string{
		`nsq_channel_dropped_messages_total{channel="c",topic="orders"} 4`,
		`nsq_channel_expired_messages_total{channel="c",topic="orders"} 0`,
		`nsq_channel_dead_letter_messages_total{channel="c",topic="orders"} 0`,
		`nsq_topic_dropped_messages_total{topic="orders"} 0`,
		`nsq_topic_expired_messages_total{topic="orders"} 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestPolicyFileAndDowngrade: policies live in their own file, nsqd.dat
// holds exactly NSQ v1.3.0's fields (so NSQ starts on the data dir), and
// a deleted topic's policy leaves the file.
func TestPolicyFileAndDowngrade(t *testing.T) {
	o := testOptions(t)
	d := startDaemon(t, o)
	if _, err := os.Stat(filepath.Join(o.DataPath, policiesFile)); !os.IsNotExist(err) {
		t.Fatalf("policies file exists without policies: %v", err)
	}
	d.mustDo("POST", "/topic/create?topic=orders", "", 200)
	d.mustDo("POST", "/channel/create?topic=orders&channel=c", "", 200)
	d.postPolicy("/channel/policy?topic=orders&channel=c", `{"max_age":"90s"}`)
	b, err := os.ReadFile(filepath.Join(o.DataPath, policiesFile))
	if err != nil || string(b) != `{"topics":{"orders":{"channels":{"c":{"max_age":"1m30s"}}}}}` {
		t.Fatalf("policies file: %s %v", b, err)
	}
	d.stop()
	// NSQ v1.3.0's nsqd.dat shape, and nothing else.
	type nsqChannel struct {
		Name   string `json:"name"`
		Paused bool   `json:"paused"`
	}
	var nsqMeta struct {
		Topics []struct {
			Channels []nsqChannel `json:"channels"`
			Name     string       `json:"name"`
			Paused   bool         `json:"paused"`
		} `json:"topics"`
		Version string `json:"version"`
	}
	raw, err := os.ReadFile(filepath.Join(o.DataPath, metadataFile))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&nsqMeta); err != nil {
		t.Fatalf("nsqd.dat has fields NSQ v1.3.0 does not: %v: %s", err, raw)
	}

	d = startDaemon(t, o)
	if got := d.mustDo("GET", "/channel/policy?topic=orders&channel=c", "", 200); !strings.Contains(got, `"max_age":"1m30s"`) {
		t.Fatalf("policy after restart: %s", got)
	}
	d.mustDo("POST", "/topic/delete?topic=orders", "", 200)
	testutil.WaitFor(t, "policies file removed with the last policy", 5*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(o.DataPath, policiesFile))
		return os.IsNotExist(err)
	})
}

func TestPolicyFlagsValidated(t *testing.T) {
	for _, mut := range []func(o *Options){
		func(o *Options) { o.QueueOverflow = "drop_newest" },
		func(o *Options) { o.QueueMaxMsgs = -1 },
		func(o *Options) { o.ChannelDeadLetterTopic = "no good" },
	} {
		o := testOptions(t)
		mut(o)
		if _, err := New(o); err == nil {
			t.Errorf("New accepted bad policy flags")
		}
	}
}

func TestParsePolicyPatchKeepsOtherFields(t *testing.T) {
	base, err := parsePolicyPatch([]byte(`{"max_msgs":5,"max_age":"1m"}`), nil, true, "t")
	if err != nil {
		t.Fatal(err)
	}
	next, err := parsePolicyPatch([]byte(`{"max_bytes":9}`), base, true, "t")
	if err != nil {
		t.Fatal(err)
	}
	if *next.MaxMsgs != 5 || *next.MaxBytes != 9 || *next.MaxAge != time.Minute || base.MaxBytes != nil {
		t.Fatalf("patch: %+v (base %+v)", next, base)
	}
	p := resolvePolicy("t", next, nil, &policySettings{DeadLetterTopic: ptr("t")})
	if p.deadLetterTopic != "" {
		t.Fatalf("a dead-letter topic equal to the channel's topic must be ignored")
	}
	if resolvePolicy("t", &policySettings{}) != nil {
		t.Fatalf("an all-off policy must resolve to nil")
	}
}

func ptr[T any](v T) *T { return &v }

// TestPolicyDataDirStartsNSQ: NSQ v1.3.0's own nsqd starts on a data dir
// this daemon wrote with policies, and finds its topics, channels and
// messages.
func TestPolicyDataDirStartsNSQ(t *testing.T) {
	bin := filepath.Join(testutil.ReferenceBin(t, "nsqd"), "nsqd")
	o := testOptions(t)
	o.MemQueueSize = 2
	d := startDaemon(t, o)
	d.mustDo("POST", "/topic/create?topic=orders", "", 200)
	d.mustDo("POST", "/channel/create?topic=orders&channel=c", "", 200)
	d.postPolicy("/topic/policy?topic=orders", `{"max_msgs":3}`)
	d.postPolicy("/channel/policy?topic=orders&channel=c", `{"max_attempts":2,"dead_letter_topic":"dead"}`)
	publishInBatches(t, newProducer(t, d.tcp), "orders", 0, 5)
	d.stop()

	httpAddr := freeLocalAddr(t)
	cmd := exec.Command(bin, "--data-path="+o.DataPath, "--tcp-address="+freeLocalAddr(t),
		"--http-address="+httpAddr, "--https-address=", "--log-level=warn")
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	var depth float64
	testutil.WaitFor(t, "NSQ v1.3.0 nsqd serving the data dir", 10*time.Second, func() bool {
		resp, err := http.Get("http://" + httpAddr + "/stats?format=json&topic=orders&channel=c")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var st struct {
			Topics []struct {
				Channels []struct {
					Depth float64 `json:"depth"`
				} `json:"channels"`
			} `json:"topics"`
		}
		if json.NewDecoder(resp.Body).Decode(&st) != nil || len(st.Topics) != 1 || len(st.Topics[0].Channels) != 1 {
			return false
		}
		depth = st.Topics[0].Channels[0].Depth
		return true
	})
	if depth != 3 {
		t.Fatalf("NSQ sees depth %v on orders/c, want the 3 the cap kept; its log:\n%s", depth, out)
	}
}

func freeLocalAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestPolicyDeadLetterReleasesHeldRecords: with --mem-queue-size=0 a
// channel holds each message's disk record until the message is done; a
// message that leaves by max_attempts is done once it is on the
// dead-letter topic, so a restart does not deliver it again.
func TestPolicyDeadLetterReleasesHeldRecords(t *testing.T) {
	o := testOptions(t)
	o.MemQueueSize = 0
	d := startDaemon(t, o)
	const n = 30
	d.jobs(`{"max_attempts":1,"dead_letter_topic":"dlq"}`, n)
	cfg := nsqConfig()
	cfg.MaxInFlight = n
	cfg.MaxBackoffDuration = 0
	s := &countingSink{sink: newSink(), requeue: true}
	c := newConsumer(t, d.tcp, "jobs", "work", cfg, s)
	testutil.WaitFor(t, "every message dead-lettered", 10*time.Second, func() bool {
		cs, _ := d.channelStats("jobs", "work")
		return cs.DeadLetterCount == n
	})
	c.Stop()
	<-c.StopChan
	d.stop()

	d = startDaemon(t, o)
	cs, _ := d.channelStats("jobs", "work")
	if cs.Depth != 0 {
		t.Fatalf("after a restart the channel holds %d messages that had left it", cs.Depth)
	}
	d.consumeExactly("dlq", "inspect", policyStrings(0, n))
}

// TestPolicyDeadLetterCycle: a channel policy whose dead-letter topic leads
// back to the channel's own topic is refused, and a message out of
// attempts in a channel of a dead-letter topic is dropped and counted, not
// dead-lettered again, so that a cycle made otherwise (by a channel created
// later, which takes the node-wide default) cannot multiply a poison
// message without bound.
func TestPolicyDeadLetterCycle(t *testing.T) {
	o := testOptions(t)
	o.ChannelDeadLetterTopic = "a" // every channel but a's dead-letters into a
	o.ChannelMaxAttempts = 2
	d := startDaemon(t, o)
	mkChannel := func(topic, channel string) {
		d.mustDo("POST", "/topic/create?topic="+topic, "", http.StatusOK)
		d.mustDo("POST", "/channel/create?topic="+topic+"&channel="+channel, "", http.StatusOK)
	}
	mkChannel("a", "c")
	mkChannel("b", "x")
	mkChannel("b", "y")
	// b's channels lead to a, so a/c may not lead to b.
	code, body := d.do("POST", "/channel/policy?topic=a&channel=c", `{"dead_letter_topic":"b"}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "cycle") || !strings.Contains(body, "dead_letter_topic") {
		t.Fatalf("a/c → b with b/x → a: %d %s; want 400 INVALID_POLICY naming the cycle", code, body)
	}
	// e/w → f is allowed while f has no channel; f/z → e then closes it.
	mkChannel("e", "w")
	d.postPolicy("/channel/policy?topic=e&channel=w", `{"dead_letter_topic":"f"}`)
	mkChannel("f", "z")
	code, body = d.do("POST", "/channel/policy?topic=f&channel=z", `{"dead_letter_topic":"e"}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "f → e → f") {
		t.Fatalf("f/z → e with e/w → f: %d %s; want 400 naming f → e → f", code, body)
	}

	// A cycle no POST closes: a/c → g is allowed while g has no channel;
	// g's channels, made later, take the default (→ a).
	d.postPolicy("/channel/policy?topic=a&channel=c", `{"dead_letter_topic":"g"}`)
	mkChannel("g", "q")
	mkChannel("g", "r")

	// Consumers that always REQ: one poison message published to b goes to
	// a once from each of b's channels, and a/c, a dead-letter topic's
	// channel, drops both copies there instead of sending them round the
	// cycle, doubling at g.
	cfg := nsqConfig()
	cfg.DefaultRequeueDelay = 0
	cfg.MaxBackoffDuration = 0
	cfg.MaxAttempts = 0
	for _, tc := range [][2]string{{"a", "c"}, {"b", "x"}, {"b", "y"}, {"g", "q"}, {"g", "r"}} {
		newConsumer(t, d.tcp, tc[0], tc[1], cfg, &countingSink{sink: newSink(), requeue: true})
	}
	if err := newProducer(t, d.tcp).Publish("b", []byte("poison")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "both copies of the poison message dropped in a/c", 10*time.Second, func() bool {
		cs, _ := d.channelStats("a", "c")
		return cs.DeadLetterCount == 2 && cs.Depth+int64(cs.InFlightCount)+int64(cs.DeferredCount) == 0
	})
	if n := d.topicStats("a").MessageCount; n != 2 {
		t.Errorf("a received %d dead letters, want 2", n)
	}
	if n := d.topicStats("g").MessageCount; n != 0 {
		t.Errorf("g received %d dead letters, want none", n)
	}
}
