package nsqd

// Behaviour of topics, channels and subscriptions as go-nsq v1.1.0 (and,
// where a misbehaving client is needed, a raw socket) sees them.

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
)

// delivery is one message as a handler saw it.
type delivery struct {
	body     string
	id       string
	attempts uint16
	ts       int64 // publish time from the frame
	at       time.Time
	consumer int
}

// recorder records every delivery; respond decides what to do with each
// (nil = FIN by returning nil).
type recorder struct {
	mu      sync.Mutex
	all     []delivery
	msgs    []*nsq.Message
	counts  map[string]int
	respond func(m *nsq.Message, d delivery)
}

func newRecorder() *recorder { return &recorder{counts: map[string]int{}} }

// handler returns the go-nsq handler for consumer number n.
func (r *recorder) handler(n int) nsq.Handler {
	return nsq.HandlerFunc(func(m *nsq.Message) error {
		d := delivery{body: string(m.Body), id: string(m.ID[:]), attempts: m.Attempts, ts: m.Timestamp, at: time.Now(), consumer: n}
		r.mu.Lock()
		r.all = append(r.all, d)
		r.msgs = append(r.msgs, m)
		r.counts[d.body]++
		respond := r.respond
		r.mu.Unlock()
		if respond != nil {
			m.DisableAutoResponse()
			respond(m, d)
		}
		return nil
	})
}

// consume starts go-nsq consumer number n feeding r. Before the consumer
// stops, every message left unanswered is FINed (a no-op for answered
// ones), since go-nsq waits for its messages in flight when stopping.
func (r *recorder) consume(t *testing.T, addr, topic, channel string, cfg *nsq.Config, n int) *nsq.Consumer {
	t.Helper()
	c := newConsumer(t, addr, topic, channel, cfg, r.handler(n))
	t.Cleanup(func() {
		r.mu.Lock()
		msgs := append([]*nsq.Message(nil), r.msgs...)
		r.mu.Unlock()
		for _, m := range msgs {
			m.Finish()
		}
	})
	return c
}

func (r *recorder) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.all...)
}

func (r *recorder) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.counts)
}

func (r *recorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.all)
}

// exactlyOnce fails unless every body in want arrived exactly once and
// nothing else arrived.
func (r *recorder) exactlyOnce(t *testing.T, want [][]byte) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.counts) != len(want) || len(r.all) != len(want) {
		t.Fatalf("%d deliveries of %d bodies, want %d exactly once", len(r.all), len(r.counts), len(want))
	}
	for _, b := range want {
		if r.counts[string(b)] != 1 {
			t.Fatalf("%q delivered %d times", b, r.counts[string(b)])
		}
	}
}

// waitChannel waits until the channel's stats satisfy cond.
func waitChannel(t *testing.T, d *testDaemon, topic, channel, what string, cond func(ChannelStats) bool) ChannelStats {
	t.Helper()
	var cs ChannelStats
	testutil.WaitFor(t, fmt.Sprintf("%s/%s: %s", topic, channel, what), 10*time.Second, func() bool {
		var ok bool
		cs, ok = coreChannel(d, topic, channel)
		return ok && cond(cs)
	})
	return cs
}

// waitReady waits for n subscribers of the channel, each with RDY > 0.
func waitReady(t *testing.T, d *testDaemon, topic, channel string, n int) {
	t.Helper()
	waitChannel(t, d, topic, channel, fmt.Sprintf("%d ready subscribers", n), func(cs ChannelStats) bool {
		if cs.ClientCount != n || len(cs.Clients) != n {
			return false
		}
		for _, c := range cs.Clients {
			if c.ReadyCount == 0 {
				return false
			}
		}
		return true
	})
}

func chanIdle(cs ChannelStats) bool {
	return cs.InFlightCount == 0 && cs.Depth == 0 && cs.DeferredCount == 0
}

func consumerConfig(maxInFlight int) *nsq.Config {
	c := nsqConfig()
	c.MaxInFlight = maxInFlight
	return c
}

// TestPublishAndMPUBExactlyOnce: PUB and MPUB messages arrive once each,
// with attempts 1 and their publish time.
func TestPublishAndMPUBExactlyOnce(t *testing.T) {
	forEachTransport(t, nil, testPublishAndMPUBExactlyOnce)
}

func testPublishAndMPUBExactlyOnce(t *testing.T, r *rig) {
	d := r.d
	p := r.producer(t)
	rec := newRecorder()
	rec.consume(t, r.addr, "pm", "ch", r.config(50), 0)
	waitReady(t, d, "pm", "ch", 1)

	start := time.Now().UnixNano()
	single := bodies("single", 50)
	for _, b := range single {
		if err := p.Publish("pm", b); err != nil {
			t.Fatal(err)
		}
	}
	multi := bodies("multi", 200)
	if err := p.MultiPublish("pm", multi[:100]); err != nil {
		t.Fatal(err)
	}
	if err := p.MultiPublish("pm", multi[100:]); err != nil {
		t.Fatal(err)
	}
	end := time.Now().UnixNano()
	waitChannel(t, d, "pm", "ch", "all finished", func(cs ChannelStats) bool { return cs.MessageCount == 250 && chanIdle(cs) })
	rec.exactlyOnce(t, append(single, multi...))
	ids := map[string]bool{}
	for _, dl := range rec.deliveries() {
		if dl.attempts != 1 || dl.ts < start || dl.ts > end || ids[dl.id] {
			t.Fatalf("delivery %+v (publish window %d..%d, duplicate id %v)", dl, start, end, ids[dl.id])
		}
		ids[dl.id] = true
	}
	if ts := d.Stats("pm", "", false)[0]; ts.MessageCount != 250 || ts.Depth != 0 {
		t.Fatalf("topic stats %+v", ts)
	}
}

// TestDPUB: DPUB over each transport defers the message, which waits in
// deferred_count meanwhile, whether the channel exists at publish time or
// is created later. When it comes, to the nanosecond, is the fake clock's
// (TestSessionDeferredPublish, TestUnitDeferredDueOrder,
// TestUnitDeferredBeforeChannel).
func TestDPUB(t *testing.T) { forEachTransport(t, nil, testDPUB) }

func testDPUB(t *testing.T, r *rig) {
	const delay = 50 * time.Millisecond
	d := r.d
	p := r.producer(t)
	rec := newRecorder()
	rec.consume(t, r.addr, "dp", "ch", r.config(1), 0)
	waitReady(t, d, "dp", "ch", 1)

	if err := p.DeferredPublish("dp", delay, []byte("soon")); err != nil {
		t.Fatal(err)
	}
	if err := p.DeferredPublish("dp", time.Hour, []byte("later")); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish("dp", []byte("now")); err != nil {
		t.Fatal(err)
	}
	cs := waitChannel(t, d, "dp", "ch", "only the 1h message left", func(cs ChannelStats) bool {
		return cs.InFlightCount == 0 && cs.Depth == 0 && cs.DeferredCount == 1 && cs.MessageCount == 3
	})
	if got := rec.deliveries(); len(got) != 2 || got[0].body+got[1].body != "nowsoon" && got[0].body+got[1].body != "soonnow" {
		t.Fatalf("deliveries %+v, want now and soon once each", got)
	}
	if cs.RequeueCount != 0 || cs.TimeoutCount != 0 {
		t.Fatalf("channel stats %+v", cs)
	}

	// DPUB to a topic with no channel yet: the delay survives the fan-out.
	if err := p.DeferredPublish("dp2", time.Hour, []byte("deferred-before-channel")); err != nil {
		t.Fatal(err)
	}
	rec2 := newRecorder()
	rec2.consume(t, r.addr, "dp2", "ch", r.config(1), 0)
	waitChannel(t, d, "dp2", "ch", "the DPUB deferred in the new channel", func(cs ChannelStats) bool {
		return cs.DeferredCount == 1 && cs.Depth == 0
	})
	if n := rec2.total(); n != 0 {
		t.Fatalf("%d deliveries of a DPUB due in an hour", n)
	}
}

// TestREQ: REQ with a delay defers the message; attempts count each
// delivery; requeue_count counts on channel and client. When the delay
// ends is the fake clock's (TestSessionRequeueDelay).
func TestREQ(t *testing.T) { forEachTransport(t, nil, testREQ) }

func testREQ(t *testing.T, r *rig) {
	const delay = 20 * time.Millisecond
	d := r.d
	p := r.producer(t)
	rec := newRecorder()
	rec.respond = func(m *nsq.Message, dl delivery) {
		switch {
		case dl.body == "parked":
			m.RequeueWithoutBackoff(time.Hour)
		case dl.attempts == 1:
			m.RequeueWithoutBackoff(delay)
		case dl.attempts == 2:
			m.RequeueWithoutBackoff(0)
		default:
			m.Finish()
		}
	}
	rec.consume(t, r.addr, "rq", "ch", r.config(5), 0)
	waitReady(t, d, "rq", "ch", 1)
	if err := p.Publish("rq", []byte("bounce")); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish("rq", []byte("parked")); err != nil {
		t.Fatal(err)
	}
	cs := waitChannel(t, d, "rq", "ch", "bounce finished, parked deferred", func(cs ChannelStats) bool {
		return cs.InFlightCount == 0 && cs.Depth == 0 && cs.DeferredCount == 1 && cs.RequeueCount == 3
	})
	var bounces []delivery
	for _, dl := range rec.deliveries() {
		if dl.body == "bounce" {
			bounces = append(bounces, dl)
		}
	}
	if len(bounces) != 3 {
		t.Fatalf("bounce delivered %d times, want 3: %+v", len(bounces), bounces)
	}
	for i, dl := range bounces {
		if dl.attempts != uint16(i+1) || dl.id != bounces[0].id {
			t.Fatalf("delivery %d: %+v", i, dl)
		}
	}
	if cs.TimeoutCount != 0 || len(cs.Clients) != 1 {
		t.Fatalf("channel stats %+v", cs)
	}
	if c := cs.Clients[0]; c.RequeueCount != 3 || c.FinishCount != 1 || c.MessageCount != 4 {
		t.Fatalf("client stats %+v", c)
	}
}

// redeliveryTimeout is TestTimeoutRedelivery's --msg-timeout.
const redeliveryTimeout = 300 * time.Millisecond

// TestTimeoutRedelivery: over each transport, a message never FINed is
// redelivered after msg_timeout with attempts 2. The timeout to the
// nanosecond, TOUCH and a client's own msg_timeout are the fake clock's
// (TestUnitInFlightTimeoutRequeues, TestSessionTouch,
// TestSessionIdentifyMsgTimeout).
func TestTimeoutRedelivery(t *testing.T) {
	forEachTransport(t, func(o *Options) { o.MsgTimeout = redeliveryTimeout }, testTimeoutRedelivery)
}

func testTimeoutRedelivery(t *testing.T, r *rig) {
	d := r.d
	rec := newRecorder()
	rec.respond = func(m *nsq.Message, dl delivery) {
		if dl.attempts >= 2 {
			m.Finish()
		}
	}
	rec.consume(t, r.addr, "to", "ch", r.config(1), 0)
	waitReady(t, d, "to", "ch", 1)
	pubAt := time.Now()
	if err := r.producer(t).Publish("to", []byte("ignored")); err != nil {
		t.Fatal(err)
	}
	// Idle too: the client's FIN count moves before the channel's in-flight
	// gauge, which is published when the FIN lets go of the channel's lock.
	cs := waitChannel(t, d, "to", "ch", "finished after a timeout", func(cs ChannelStats) bool {
		return len(cs.Clients) == 1 && cs.Clients[0].FinishCount == 1 && chanIdle(cs)
	})
	got := rec.deliveries()
	if len(got) != 2 || got[0].attempts != 1 || got[1].attempts != 2 || got[0].id != got[1].id {
		t.Fatalf("deliveries %+v", got)
	}
	// Measured from the publish, not the first arrival, which the transport
	// may have held up for longer than the second.
	if el := got[1].at.Sub(pubAt); el < redeliveryTimeout {
		t.Fatalf("redelivered %s after the publish, before msg_timeout %s", el, redeliveryTimeout)
	}
	if cs.TimeoutCount < 1 || cs.RequeueCount != 0 || !chanIdle(cs) {
		t.Fatalf("channel stats %+v", cs)
	}
}

// TestSharedChannel: consumers of one channel share its messages, each
// message going to exactly one of them.
func TestSharedChannel(t *testing.T) { forEachTransport(t, nil, testSharedChannel) }

func testSharedChannel(t *testing.T, r *rig) {
	d := r.d
	rec := newRecorder()
	rec.consume(t, r.addr, "sh", "ch", r.config(10), 0)
	rec.consume(t, r.addr, "sh", "ch", r.config(10), 1)
	waitReady(t, d, "sh", "ch", 2)
	p := r.producer(t)
	msgs := bodies("s", 500)
	for i := 0; i < len(msgs); i += 50 {
		if err := p.MultiPublish("sh", msgs[i:i+50]); err != nil {
			t.Fatal(err)
		}
	}
	cs := waitChannel(t, d, "sh", "ch", "all finished", func(cs ChannelStats) bool { return cs.MessageCount == 500 && chanIdle(cs) })
	rec.exactlyOnce(t, msgs)
	per := map[int]int{}
	for _, dl := range rec.deliveries() {
		per[dl.consumer]++
	}
	if per[0] == 0 || per[1] == 0 {
		t.Fatalf("messages not shared: %v", per)
	}
	if cs.RequeueCount != 0 || cs.TimeoutCount != 0 {
		t.Fatalf("channel stats %+v", cs)
	}
}

// TestChannelsEachGetEverything: every channel of a topic gets every message.
func TestChannelsEachGetEverything(t *testing.T) {
	forEachTransport(t, nil, testChannelsEachGetEverything)
}

func testChannelsEachGetEverything(t *testing.T, r *rig) {
	d := r.d
	p := r.producer(t)
	recA, recB := newRecorder(), newRecorder()
	recA.consume(t, r.addr, "fan", "a", r.config(20), 0)
	recB.consume(t, r.addr, "fan", "b", r.config(20), 0)
	waitReady(t, d, "fan", "a", 1)
	waitReady(t, d, "fan", "b", 1)
	msgs := bodies("e", 200)
	if err := p.MultiPublish("fan", msgs[:100]); err != nil {
		t.Fatal(err)
	}
	for _, b := range msgs[100:] {
		if err := p.Publish("fan", b); err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range []string{"a", "b"} {
		waitChannel(t, d, "fan", ch, "all finished", func(cs ChannelStats) bool {
			return cs.MessageCount == 200 && chanIdle(cs) && finishedSum(cs) == 200
		})
	}
	recA.exactlyOnce(t, msgs)
	recB.exactlyOnce(t, msgs)
}

// finishedSum sums finish_count over the channel's clients.
func finishedSum(cs ChannelStats) uint64 {
	var n uint64
	for _, c := range cs.Clients {
		n += c.FinishCount
	}
	return n
}

// TestRDY: RDY is a window of outstanding messages; RDY 0 stops delivery.
func TestRDY(t *testing.T) { forEachTransport(t, nil, testRDY) }

func testRDY(t *testing.T, r *rig) {
	d := r.d
	p := r.producer(t)
	c := r.dialV2(t, map[string]any{"output_buffer_size": -1})
	c.sub("rdy", "ch")
	c.send("RDY 0")
	if err := p.MultiPublish("rdy", bodies("r", 10)); err != nil {
		t.Fatal(err)
	}
	cs := waitChannel(t, d, "rdy", "ch", "10 queued", func(cs ChannelStats) bool { return cs.Depth == 10 })
	if cs.InFlightCount != 0 || cs.Clients[0].MessageCount != 0 {
		t.Fatalf("RDY 0 yet delivered: %+v", cs)
	}

	c.send("RDY 3")
	var got []v2msg
	for i := 0; i < 3; i++ {
		got = append(got, c.expectMsg())
	}
	cs = waitChannel(t, d, "rdy", "ch", "3 in flight", func(cs ChannelStats) bool { return cs.InFlightCount == 3 })
	if cs.Depth != 7 || cs.Clients[0].ReadyCount != 3 {
		t.Fatalf("after RDY 3: %+v", cs)
	}
	c.send("RDY 3") // same window: no-op
	c.send("FIN " + got[0].id)
	got = append(got, c.expectMsg()) // one slot freed: one more
	waitChannel(t, d, "rdy", "ch", "window refilled", func(cs ChannelStats) bool {
		return cs.InFlightCount == 3 && cs.Depth == 6 && cs.Clients[0].FinishCount == 1
	})

	c.send("RDY 0")
	for _, m := range got[1:] {
		c.send("FIN " + m.id)
	}
	// /stats reads the channel's counters and then its clients' without a
	// lock, so one snapshot can show the client's FIN count ahead of the
	// channel's in-flight count: wait for both.
	cs = waitChannel(t, d, "rdy", "ch", "FINs processed and nothing in flight", func(cs ChannelStats) bool {
		return cs.Clients[0].FinishCount == 4 && cs.InFlightCount == 0
	})
	if cs.Depth != 6 || cs.Clients[0].MessageCount != 4 {
		t.Fatalf("RDY 0 yet delivered after FIN: %+v", cs)
	}
	// RDY without a count means 1.
	c.send("RDY")
	c.expectMsg()
	waitChannel(t, d, "rdy", "ch", "RDY means RDY 1", func(cs ChannelStats) bool {
		return cs.InFlightCount == 1 && cs.Depth == 5 && cs.Clients[0].ReadyCount == 1
	})

	// go-nsq: ChangeMaxInFlight(0) stops delivery too.
	rec := newRecorder()
	cons := rec.consume(t, r.addr, "rdy2", "ch", r.config(5), 0)
	waitReady(t, d, "rdy2", "ch", 1)
	cons.ChangeMaxInFlight(0)
	waitChannel(t, d, "rdy2", "ch", "RDY 0", func(cs ChannelStats) bool { return cs.Clients[0].ReadyCount == 0 })
	if err := p.MultiPublish("rdy2", bodies("x", 5)); err != nil {
		t.Fatal(err)
	}
	if cs := waitChannel(t, d, "rdy2", "ch", "5 queued", func(cs ChannelStats) bool { return cs.Depth == 5 }); cs.InFlightCount != 0 {
		t.Fatalf("max in flight 0 yet delivered: %+v", cs)
	}
	cons.ChangeMaxInFlight(5)
	testutil.WaitFor(t, "delivery after RDY 5", 10*time.Second, func() bool { return rec.total() == 5 })
}

// TestUnresponsiveConsumerDropped: a consumer that stops answering
// heartbeats is closed after two intervals and its messages go to another.
func TestUnresponsiveConsumerDropped(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	p := newProducer(t, d.tcp)
	c := dialV2(t, d.tcp)
	c.identify(map[string]any{"heartbeat_interval": 1000})
	c.sub("hbt", "ch")
	if err := p.MultiPublish("hbt", bodies("h", 5)); err != nil {
		t.Fatal(err)
	}
	rdyAt := time.Now()
	c.send("RDY 10")
	held := map[string]bool{}
	for i := 0; i < 5; i++ {
		held[c.expectMsg().body] = true
	}

	rec := newRecorder()
	rec.consume(t, d.tcp, "hbt", "ch", consumerConfig(10), 1)
	waitReady(t, d, "hbt", "ch", 2)

	// Never NOP: after 2 × 1 s without a command the server closes us.
	heartbeats := 0
	for {
		f, err := c.readFrame()
		if err != nil {
			if !v2IsClosed(err) {
				t.Fatalf("read: %v, want the server to close the connection", err)
			}
			break
		}
		if !v2IsHeartbeat(f) {
			t.Fatalf("unexpected frame %d %q", f.typ, f.data)
		}
		heartbeats++
	}
	el := time.Since(rdyAt)
	if el < 2*time.Second || el > 5*time.Second {
		t.Fatalf("closed %s after the last command, want 2 s (two heartbeat intervals)", el)
	}
	if heartbeats == 0 {
		t.Fatal("no heartbeat before the close")
	}
	testutil.WaitFor(t, "the held messages at the other consumer", 10*time.Second, func() bool { return rec.distinct() == 5 })
	for _, dl := range rec.deliveries() {
		if !held[dl.body] || dl.attempts != 2 {
			t.Fatalf("delivery %+v", dl)
		}
	}
	waitChannel(t, d, "hbt", "ch", "one client, idle", func(cs ChannelStats) bool { return cs.ClientCount == 1 && chanIdle(cs) })
}

// TestMaxChannelConsumers: past --max-channel-consumers SUB fails fatally.
func TestMaxChannelConsumers(t *testing.T) {
	o := testOptions(t)
	o.MaxChannelConsumers = 2
	d := startDaemon(t, o)
	a, b := dialV2(t, d.tcp), dialV2(t, d.tcp)
	a.sub("mc", "ch")
	b.sub("mc", "ch")
	c := dialV2(t, d.tcp)
	c.send("SUB mc ch")
	c.expectError("E_SUB_FAILED SUB failed consumers for mc:ch exceeds limit of 2")
	c.expectClosed()
	// another channel of the topic has its own limit
	dialV2(t, d.tcp).sub("mc", "other")
	// once a consumer leaves there is room again
	a.conn.Close()
	waitChannel(t, d, "mc", "ch", "a gone", func(cs ChannelStats) bool { return cs.ClientCount == 1 })
	dialV2(t, d.tcp).sub("mc", "ch")
}

// TestSampleRate: a client with sample_rate N gets about N% of a channel's
// messages; the rest are consumed without delivery or requeue.
func TestSampleRate(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	cfg := consumerConfig(100)
	cfg.SampleRate = 10
	rec := newRecorder()
	rec.consume(t, d.tcp, "sr", "ch", cfg, 0)
	waitReady(t, d, "sr", "ch", 1)
	p := newProducer(t, d.tcp)
	msgs := bodies("s", 1000)
	for i := 0; i < len(msgs); i += 200 {
		if err := p.MultiPublish("sr", msgs[i:i+200]); err != nil {
			t.Fatal(err)
		}
	}
	cs := waitChannel(t, d, "sr", "ch", "all consumed", func(cs ChannelStats) bool {
		return cs.MessageCount == 1000 && chanIdle(cs) && cs.Clients[0].FinishCount == cs.Clients[0].MessageCount
	})
	n := rec.total()
	// binomial(1000, ~0.1): mean ~100, sd ~10
	if n < 30 || n > 250 || uint64(n) != cs.Clients[0].MessageCount {
		t.Fatalf("sample_rate 10 delivered %d of 1000 (client message_count %d)", n, cs.Clients[0].MessageCount)
	}
	if rec.distinct() != n || cs.RequeueCount != 0 || cs.TimeoutCount != 0 || cs.Clients[0].SampleRate != 10 {
		t.Fatalf("stats %+v, %d distinct of %d", cs, rec.distinct(), n)
	}
}

// TestEphemeral: an ephemeral channel goes away with its last client, an
// ephemeral topic with its last channel; durable ones stay.
func TestEphemeral(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	p := newProducer(t, d.tcp)

	// ephemeral channel on a durable topic
	a, b := dialV2(t, d.tcp), dialV2(t, d.tcp)
	a.sub("dur", "e#ephemeral")
	b.sub("dur", "e#ephemeral")
	dialV2(t, d.tcp).sub("dur", "kept")
	a.conn.Close()
	waitChannel(t, d, "dur", "e#ephemeral", "one client left", func(cs ChannelStats) bool { return cs.ClientCount == 1 })
	b.conn.Close()
	testutil.WaitFor(t, "ephemeral channel deleted", 5*time.Second, func() bool {
		tp, ok := d.GetExistingTopic("dur")
		if !ok {
			return false
		}
		_, ok = tp.GetExistingChannel("e#ephemeral")
		return !ok
	})
	if _, ok := d.GetExistingTopic("dur"); !ok {
		t.Fatal("durable topic deleted with its ephemeral channel")
	}

	// ephemeral topic: deleted with its last (ephemeral) channel
	rec := newRecorder()
	cons := rec.consume(t, d.tcp, "et#ephemeral", "c#ephemeral", nil, 0)
	if err := p.Publish("et#ephemeral", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "delivery on the ephemeral topic", 5*time.Second, func() bool { return rec.total() == 1 })
	cons.Stop()
	<-cons.StopChan
	testutil.WaitFor(t, "ephemeral topic deleted", 5*time.Second, func() bool {
		_, ok := d.GetExistingTopic("et#ephemeral")
		return !ok
	})

	// an ephemeral topic with a durable channel keeps both
	c := dialV2(t, d.tcp)
	c.sub("et2#ephemeral", "durable")
	c.conn.Close()
	testutil.WaitFor(t, "client gone", 5*time.Second, func() bool {
		cs, ok := coreChannel(d, "et2#ephemeral", "durable")
		return ok && cs.ClientCount == 0
	})
	if _, ok := d.GetExistingTopic("et2#ephemeral"); !ok {
		t.Fatal("ephemeral topic with a durable channel deleted")
	}
}

// TestEphemeralResubscribeRace: subscribing to an ephemeral channel while
// its last client leaves never leaves the new subscriber on a deleted
// channel (or topic), and publishing to an ephemeral topic being deleted
// reaches its successor.
func TestEphemeralResubscribeRace(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	for i := 0; i < 200; i++ {
		topic := "race"
		if i%2 == 1 {
			topic = "race#ephemeral"
		}
		channel := fmt.Sprintf("c%d#ephemeral", i)
		a := dialV2(t, d.tcp)
		a.sub(topic, channel)
		b := dialV2(t, d.tcp)
		a.conn.Close()
		b.sub(topic, channel)
		body := fmt.Sprintf("m%d", i)
		b.pub(topic, body)
		b.send("RDY 1")
		f := b.next()
		if f.typ != 2 {
			t.Fatalf("iteration %d: got frame %d %q, want message %q", i, f.typ, f.data, body)
		}
		if m := v2Decode(t, f.data); m.body != body {
			t.Fatalf("iteration %d: got %q, want %q", i, m.body, body)
		} else {
			b.send("FIN " + m.id)
		}
		b.conn.Close()
	}

	// PUB while the topic's last client leaves is never refused.
	p := dialV2(t, d.tcp)
	for i := 0; i < 200; i++ {
		a := dialV2(t, d.tcp)
		a.sub("gone#ephemeral", "c#ephemeral")
		a.conn.Close()
		p.pub("gone#ephemeral", fmt.Sprintf("p%d", i))
	}
}

// TestDeleteClosesSubscribers: deleting a channel or topic closes the
// connections subscribed to it, so clients reconnect to a live channel.
func TestDeleteClosesSubscribers(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	a := dialV2(t, d.tcp)
	a.sub("del", "one")
	b := dialV2(t, d.tcp)
	b.sub("del", "two")
	tp, _ := d.GetExistingTopic("del")
	if err := tp.DeleteChannel("one"); err != nil {
		t.Fatal(err)
	}
	a.expectClosed()
	b.pub("del", "b-still-subscribed")
	if err := d.DeleteExistingTopic("del"); err != nil {
		t.Fatal(err)
	}
	b.expectClosed()
}

// TestOutputBufferVariants: every output buffer setting delivers.
func TestOutputBufferVariants(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	p := newProducer(t, d.tcp)
	for i, v := range []struct {
		size    int64
		timeout time.Duration
	}{
		{-1, 0}, {-1, -1}, {0, -1}, {64, 25 * time.Millisecond}, {65536, time.Second}, {0, 0}, {100, 30 * time.Second},
	} {
		t.Run(fmt.Sprintf("size=%d,timeout=%s", v.size, v.timeout), func(t *testing.T) {
			cfg := consumerConfig(7)
			cfg.OutputBufferSize = v.size
			cfg.OutputBufferTimeout = v.timeout
			rec := newRecorder()
			ch := fmt.Sprintf("ob%d", i)
			rec.consume(t, d.tcp, "ob", ch, cfg, 0)
			waitReady(t, d, "ob", ch, 1)
			msgs := bodies(ch, 50)
			msgs = append(msgs, make([]byte, 200)) // bigger than a 64/100-byte buffer
			for _, b := range msgs {
				if err := p.Publish("ob", b); err != nil {
					t.Fatal(err)
				}
			}
			waitChannel(t, d, "ob", ch, "all finished", func(cs ChannelStats) bool {
				return cs.MessageCount == 51 && chanIdle(cs) && finishedSum(cs) == 51
			})
			rec.exactlyOnce(t, msgs)
		})
	}
}

// TestTimeoutNeverEarly: a message times out no sooner than msg_timeout
// after its frame reached the consumer (NSQ v1.3.0 is late by up to its
// 100 ms scan interval, never early). A raw consumer with room for many
// messages never answers, and messages are published a few milliseconds
// apart. Each delivery's frame is flushed msg_timeout or more after the
// one before it was, so delivery n of a message arrives no sooner than
// (n-1) × msg_timeout after the message was published (the frame carries
// the publish time). The test measures from there rather than from the
// arrival of the delivery before: the client reads a frame a scheduling
// delay after its flush, which would make a correct gap look short.
// (TestTimeoutCountsFromTheFlush checks the flush rule on the fake clock.)
func TestTimeoutNeverEarly(t *testing.T) {
	const (
		timeout  = 250 * time.Millisecond
		messages = 20
		rounds   = 3 // deliveries of each message
	)
	o := testOptions(t)
	o.MsgTimeout = timeout
	d := startDaemon(t, o)
	c := dialV2(t, d.tcp)
	c.sub("t", "c")
	c.send("RDY 100")
	go func() {
		p := dialV2(t, d.tcp)
		for i := range messages {
			p.pub("t", fmt.Sprint("m", i))
			time.Sleep(2 * time.Millisecond) // the traffic of a busy connection
		}
	}()
	for range messages * rounds {
		m := c.expectMsg()
		at := time.Now()
		earliest := time.Unix(0, m.ts).Add(time.Duration(m.attempts-1) * timeout)
		if at.Before(earliest) {
			t.Errorf("%s: delivery %d arrived %s after publishing, before %d × msg_timeout %s", m.body, m.attempts, at.Sub(time.Unix(0, m.ts)), m.attempts-1, timeout)
		}
	}
}

// TestHugeDeferralStaysDeferred: a delay as long as --max-req-timeout
// allows (centuries) defers the message for ever, as in NSQ, rather than
// overflowing the due time into the past and delivering it at once; the
// same for a REQ.
func TestHugeDeferralStaysDeferred(t *testing.T) {
	o := testOptions(t)
	o.MaxReqTimeout = 2562047 * time.Hour
	d := startDaemon(t, o)
	const huge = "9223369199999" // ms, just under the largest duration
	c := dialV2(t, d.tcp)
	c.sub("t", "c")
	c.send("RDY 1")
	p := dialV2(t, d.tcp)
	p.send("DPUB t "+huge, []byte("for ever"))
	p.expect(0, "OK")
	p.pub("t", "now")
	m := c.expectMsg()
	if m.body != "now" {
		t.Fatalf("delivered %q first, want the ready message; the deferred one came at once", m.body)
	}
	c.send("REQ " + m.id + " " + huge)
	waitChannel(t, d, "t", "c", "both messages deferred", func(cs ChannelStats) bool {
		return cs.DeferredCount == 2 && cs.InFlightCount == 0 && cs.Depth == 0
	})
}

// TestREQWithoutDelayGoesBehind: REQ with no delay puts the message behind
// the ones waiting in memory, as NSQ v1.3.0 does, so a consumer that
// cannot take it now is given the others first.
func TestREQWithoutDelayGoesBehind(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	p := dialV2(t, d.tcp)
	p.pub("t", "first")
	p.pub("t", "second")
	c := dialV2(t, d.tcp)
	c.sub("t", "c")
	c.send("RDY 1")
	m := c.expectMsg()
	if m.body != "first" {
		t.Fatalf("first delivery %q", m.body)
	}
	c.send("REQ " + m.id + " 0")
	if m := c.expectMsg(); m.body != "second" {
		t.Fatalf("after REQ 0 of %q the next delivery is %q (attempt %d), want the message waiting behind it", "first", m.body, m.attempts)
	}
}

// TestIdentifyDeflateLevelWithoutDeflate: IDENTIFY's answer reports the
// default deflate level (6, capped by --max-deflate-level), as NSQ does,
// when the client asked for a level but not for deflate.
func TestIdentifyDeflateLevelWithoutDeflate(t *testing.T) {
	o := testOptions(t)
	o.MaxDeflateLevel = 9 // so the cap does not hide the level asked for
	d := startDaemon(t, o)
	c := dialV2(t, d.tcp)
	resp := c.identifyJSON(map[string]any{"feature_negotiation": true, "deflate_level": 9})
	if resp["deflate"] != false || resp["deflate_level"] != 6.0 {
		t.Fatalf("IDENTIFY answer deflate %v deflate_level %v, want false and 6", resp["deflate"], resp["deflate_level"])
	}
}
