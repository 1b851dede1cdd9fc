package nsqd

// Tests of Topic and Channel on their own: no daemon, no socket, a fake
// Consumer and a fake clock that only moves when the test advances it, so
// timeouts, TOUCH, REQ delays and deferral are checked to the nanosecond
// without waiting for them.

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
)

// fakeClock is a clock whose time moves only by advance, which runs the
// timers that come due, in due order, in the caller's goroutine.
type fakeClock struct {
	mu     sync.Mutex
	now    int64
	timers []*fakeTimer
}

type fakeTimer struct {
	c      *fakeClock
	at     int64
	f      func()
	active bool
}

// newFakeClock starts a clock later than any real one: a real connection
// tells a message when its frame was flushed by the real clock
// (Message.markSent), which on this one is always before the delivery, so
// it counts as a flush at once and never moves a timeout.
func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()}
}

func (c *fakeClock) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc arms a timer for d from the clock's now. One armed for now or
// the past fires at once in its own goroutine, as a real one does: work
// that finishes between two advances (a restart's stored messages loaded)
// may arm a timer that is already due.
func (c *fakeClock) AfterFunc(d time.Duration, f func()) clockTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, f: f}
	c.timers = append(c.timers, t)
	t.armLocked(d)
	return t
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.armLocked(d)
	return was
}

// armLocked sets the timer to fire d from now; the clock's lock is held.
func (t *fakeTimer) armLocked(d time.Duration) {
	if d <= 0 {
		t.active = false
		go t.f()
		return
	}
	t.at, t.active = t.c.now+int64(d), true
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.active = false
	return was
}

// advance moves the clock by d, firing each timer as its time comes.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	end := c.now + int64(d)
	for {
		var next *fakeTimer
		for _, t := range c.timers {
			if t.active && t.at <= end && (next == nil || t.at < next.at) {
				next = t
			}
		}
		if next == nil {
			break
		}
		next.active = false
		c.now = max(c.now, next.at)
		c.mu.Unlock()
		next.f()
		c.mu.Lock()
	}
	c.now = end
	c.mu.Unlock()
}

// fakeConsumer records what a channel delivers to it.
type fakeConsumer struct {
	id int64

	mu        sync.Mutex
	delivered []seen
	closed    bool
	sendDue   bool  // Deliver asked for Send
	sends     []int // deliveries made when each Send came
}

func (c *fakeConsumer) ID() int64 { return c.id }

func (c *fakeConsumer) Deliver(m *Message) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.delivered = append(c.delivered, seen{m, m.ID, slices.Clone(m.Body), m.Timestamp, m.Attempts})
	ask := !c.sendDue
	c.sendDue = true
	return ask
}

func (c *fakeConsumer) Send() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sendDue = false
	c.sends = append(c.sends, len(c.delivered))
}

// sendsAt is how many deliveries had been made at each Send.
func (c *fakeConsumer) sendsAt() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sends)
}

func (c *fakeConsumer) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
}

func (c *fakeConsumer) Stats(string) ClientStats { return ClientStats{} }

// seen is a delivery as the consumer got it. Its Message is the channel's,
// live while the delivery is in flight: Subscription.Finish recycles it for
// another delivery, so what the consumer got is kept apart, as a client
// keeps the frame it read.
type seen struct {
	*Message
	ID        MessageID
	Body      []byte
	Timestamp int64
	Attempts  uint16
}

// deliveries is a copy of what was delivered so far.
func (c *fakeConsumer) deliveries() []seen {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.delivered)
}

// bodies is the bodies delivered so far, in delivery order.
func (c *fakeConsumer) bodies() []string {
	var out []string
	for _, d := range c.deliveries() {
		out = append(out, string(d.Body))
	}
	return out
}

// expectBodies fails the test unless exactly want was delivered, in order.
func (c *fakeConsumer) expectBodies(t *testing.T, when string, want ...string) {
	t.Helper()
	if got := c.bodies(); !slices.Equal(got, want) {
		t.Fatalf("%s: delivered %d %v, want %d %v", when, len(got), head(got), len(want), head(want))
	}
}

// expectDeliveries fails the test unless exactly n messages were delivered,
// and returns the last.
func (c *fakeConsumer) expectDeliveries(t *testing.T, n int, when string) seen {
	t.Helper()
	// A timer already due when armed fires in its own goroutine: wait
	// (bounded) for deliveries still on their way, then count.
	deadline := time.Now().Add(10 * time.Second)
	for len(c.deliveries()) < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	got := c.deliveries()
	if len(got) != n {
		t.Fatalf("%s: %d deliveries, want %d", when, len(got), n)
	}
	if n == 0 {
		return seen{}
	}
	return got[n-1]
}

const (
	unitMsgTimeout    = 10 * time.Second
	unitMaxMsgTimeout = 30 * time.Second
)

// queueWorld is a topic built on a fake clock, outside any daemon.
type queueWorld struct {
	clock   *fakeClock
	cfg     *queueConfig
	topic   *Topic
	retired chan *Topic // lastChannelGone calls

	mu          sync.Mutex
	nextID      uint64
	deadLetters []deadLetter // cfg.deadLetter calls
}

// deadLetter is one call of the channels' dead-letter callback.
type deadLetter struct {
	from, topic string
	bodies      []string
}

// newQueueWorld builds the topic; each option changes the config first.
func newQueueWorld(t *testing.T, topicName string, options ...func(*queueConfig)) *queueWorld {
	t.Helper()
	w := &queueWorld{clock: newFakeClock(), retired: make(chan *Topic, 1)}
	w.cfg = &queueConfig{
		dataPath:        t.TempDir(),
		memQueueSize:    100,
		maxBytesPerFile: 1 << 20,
		syncEvery:       2500, // the daemon's default
		syncTimeout:     time.Second,
		maxMsgSize:      1 << 20,
		msgTimeout:      unitMsgTimeout,
		maxMsgTimeout:   unitMaxMsgTimeout,
		logger:          slog.New(slog.DiscardHandler),
		clock:           w.clock,
		deadLetter:      w.recordDeadLetter,
	}
	for _, o := range options {
		o(w.cfg)
	}
	w.open(t, topicName)
	t.Cleanup(func() {
		if err := w.topic.close(true); err != nil {
			t.Errorf("closing topic: %v", err)
		}
	})
	return w
}

// open makes w's topic, from the files in the data path if there are any.
func (w *queueWorld) open(t *testing.T, topicName string) {
	t.Helper()
	tp, err := newTopic(topicName, w.cfg, topicHooks{lastChannelGone: func(tp *Topic) { w.retired <- tp }}, time.Minute, nil)
	if err != nil {
		t.Fatalf("newTopic: %v", err)
	}
	w.topic = tp
}

// restart closes the topic as a shutdown does, keeping its messages on
// disk, and opens it again with the given channels, which the daemon
// would recreate from its metadata.
func (w *queueWorld) restart(t *testing.T, channels ...string) []*Channel {
	t.Helper()
	if err := w.topic.close(false); err != nil {
		t.Fatalf("closing topic for a restart: %v", err)
	}
	w.open(t, w.topic.name)
	out := make([]*Channel, len(channels))
	for i, name := range channels {
		ch, err := w.topic.GetChannel(name)
		if err != nil {
			t.Fatalf("GetChannel %s after the restart: %v", name, err)
		}
		out[i] = ch
	}
	w.settle(t)
	return out
}

func (w *queueWorld) recordDeadLetter(from, topic string, bodies [][]byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	dl := deadLetter{from: from, topic: topic}
	for _, b := range bodies {
		dl.bodies = append(dl.bodies, string(b))
	}
	w.deadLetters = append(w.deadLetters, dl)
	return nil
}

// deadLettered is every body handed to the dead-letter callback for topic.
func (w *queueWorld) deadLettered(topic string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, dl := range w.deadLetters {
		if dl.topic == topic {
			out = append(out, dl.bodies...)
		}
	}
	return out
}

// deadLetterCalls is every call of the dead-letter callback so far.
func (w *queueWorld) deadLetterCalls() []deadLetter {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.deadLetters)
}

// settle waits for the work the queues do in goroutines of their own (the
// topic's backlog move, the channels' deferred-spill workers) to end. The
// fake clock stands still meanwhile: what they deliver, they deliver at the
// current fake time. The bound is generous: a spill worker writing a
// hundred thousand deferred messages on a loaded machine takes a while.
func (w *queueWorld) settle(t *testing.T) {
	t.Helper()
	testutil.WaitFor(t, "the topic's backlog move and the channels' spill workers to finish", time.Minute, func() bool {
		w.topic.mu.RLock()
		moving := w.topic.moving
		w.topic.mu.RUnlock()
		if moving {
			return false
		}
		for _, ch := range w.topic.Channels() {
			if ch.spillInTransit() {
				return false
			}
		}
		return true
	})
}

// subscribe creates channel (if needed) and a consumer subscribed to it
// with the default message timeout and the given RDY.
func (w *queueWorld) subscribe(t *testing.T, channel string, rdy int64) (*Channel, *Subscription, *fakeConsumer) {
	t.Helper()
	return w.subscribeWith(t, channel, rdy, unitMsgTimeout)
}

// subscribeWith is subscribe with the consumer's own msg_timeout (IDENTIFY).
func (w *queueWorld) subscribeWith(t *testing.T, channel string, rdy int64, msgTimeout time.Duration) (*Channel, *Subscription, *fakeConsumer) {
	t.Helper()
	ch, err := w.topic.GetChannel(channel)
	if err != nil {
		t.Fatalf("GetChannel: %v", err)
	}
	c := &fakeConsumer{id: 1}
	if l := ch.subsView.Load(); l != nil {
		c.id = int64(len(*l) + 1)
	}
	s, err := ch.Subscribe(c, msgTimeout, 0, 0)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	s.SetReady(rdy)
	w.settle(t)
	return ch, s, c
}

// deliverOne subscribes a consumer with RDY 1 to a channel "c" and
// publishes one message, which it expects the consumer to get.
func (w *queueWorld) deliverOne(t *testing.T) (*Channel, *Subscription, *fakeConsumer, MessageID) {
	t.Helper()
	ch, s, c := w.subscribe(t, "c", 1)
	id := w.publish(t, "m", 0)
	if m := c.expectDeliveries(t, 1, "after publish"); m.ID != id || m.Attempts != 1 {
		t.Fatalf("first delivery %x attempts %d, want %x attempts 1", m.ID, m.Attempts, id)
	}
	return ch, s, c, id
}

// advance moves the fake clock by d and lets the queues' own goroutines
// finish what that set off.
func (w *queueWorld) advance(t *testing.T, d time.Duration) {
	t.Helper()
	w.clock.advance(d)
	w.settle(t)
}

// dueAfter advances the clock by d in two steps and checks that c's
// deliveries up to the nth come exactly at d, none a nanosecond before; it
// returns the nth.
func (w *queueWorld) dueAfter(t *testing.T, c *fakeConsumer, d time.Duration, n int, what string) seen {
	t.Helper()
	before := len(c.deliveries())
	w.advance(t, d-time.Nanosecond)
	c.expectDeliveries(t, before, "1ns before "+what)
	w.advance(t, time.Nanosecond)
	return c.expectDeliveries(t, n, what)
}

// publish puts one message in the topic, deferred by deferFor, as
// NSQD.publish would.
func (w *queueWorld) publish(t *testing.T, body string, deferFor time.Duration) MessageID {
	t.Helper()
	return w.publishBatch(t, deferFor, body)[0]
}

// publishBatch puts bodies in the topic as one batch (an MPUB, or with
// deferFor a DPUB each), as NSQD.publish would, and returns their IDs.
func (w *queueWorld) publishBatch(t *testing.T, deferFor time.Duration, bodies ...string) []MessageID {
	t.Helper()
	ids, err := w.tryPublish(deferFor, bodies...)
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	return ids
}

// tryPublish is publishBatch that returns the topic's refusal.
func (w *queueWorld) tryPublish(deferFor time.Duration, bodies ...string) ([]MessageID, error) {
	bs := make([][]byte, len(bodies))
	for i, b := range bodies {
		bs[i] = []byte(b)
	}
	return w.put(bs, deferFor)
}

// put is what NSQD.publish does: the messages get IDs (hex, as the
// daemon's) and the current time, and go into the topic as one batch.
func (w *queueWorld) put(bodies [][]byte, deferFor time.Duration) ([]MessageID, error) {
	msgs := newBatch(len(bodies))
	ids := make([]MessageID, len(bodies))
	now := w.clock.Now()
	w.mu.Lock()
	for i, b := range bodies {
		w.nextID++
		e := &msgs[i]
		e.Body, e.Timestamp = b, now
		copy(e.ID[:], fmt.Sprintf("%016x", w.nextID))
		if deferFor > 0 {
			e.own = &Message{msgCore: e.msgCore, deferUntil: dueAfter(now, deferFor)}
		}
		ids[i] = e.ID
	}
	w.mu.Unlock()
	return ids, w.topic.Put(msgs)
}

// channelPolicy sets ch's own policy as POST /channel/policy does.
func (w *queueWorld) channelPolicy(t *testing.T, ch *Channel, body string) {
	t.Helper()
	if err := w.topic.patchChannelPolicy(ch, bodyPatch([]byte(body), true, w.topic.name)); err != nil {
		t.Fatalf("channel policy %s: %v", body, err)
	}
}

// topicPolicy sets the topic's own policy as POST /topic/policy does.
func (w *queueWorld) topicPolicy(t *testing.T, body string) {
	t.Helper()
	if err := w.topic.patchPolicy(bodyPatch([]byte(body), false, w.topic.name)); err != nil {
		t.Fatalf("topic policy %s: %v", body, err)
	}
}

// memoryBudget gives the queues a memory guard with budget's byte limits
// (--max-memory-queue-bytes, --max-deferred-memory; 0 = none) and nothing
// else: no memory pressure, no per-queue limit.
func memoryBudget(budget memBudget) func(*queueConfig) {
	return func(c *queueConfig) {
		g := &memoryGuard{}
		g.budget.Store(&budget)
		c.guard = g
	}
}

// memQueueSize sets --mem-queue-size.
func memQueueSize(n int64) func(*queueConfig) {
	return func(c *queueConfig) { c.memQueueSize = n }
}

func TestUnitInFlightTimeoutRequeues(t *testing.T) {
	w := newQueueWorld(t, "timeouts")
	ch, _, c, _ := w.deliverOne(t)

	if m := w.dueAfter(t, c, unitMsgTimeout, 2, "at the timeout"); m.Attempts != 2 {
		t.Fatalf("redelivery has attempts %d, want 2", m.Attempts)
	}
	if n := ch.timeoutCount.Load(); n != 1 {
		t.Fatalf("%d timeouts, want 1", n)
	}
}

// TestTimeoutCountsFromTheFlush: a delivery whose frame was flushed some
// time after it went in flight (it waited behind a slow socket) times out
// msg_timeout after the flush, to the nanosecond; the next delivery, whose
// flush is not reported yet, times out msg_timeout after it went in flight,
// the earlier frame's report no longer counting.
func TestTimeoutCountsFromTheFlush(t *testing.T) {
	const waited = 40 * time.Millisecond
	w := newQueueWorld(t, "flush")
	_, _, c, _ := w.deliverOne(t)
	m := c.deliveries()[0]
	markFlushed(m.Message, m.deliveredAt+int64(waited))
	w.dueAfter(t, c, unitMsgTimeout+waited, 2, "msg_timeout after the flush")
	w.dueAfter(t, c, unitMsgTimeout, 3, "msg_timeout after the second delivery")
}

// TestUnitStaleFlushLeavesRedeliveryAlone: the writer of an earlier
// delivery reports its flush after the message was delivered again (its
// first consumer FIN'd nothing; a REQ put it back): that flush says
// nothing of the new delivery's frame, which still times out a
// msg_timeout after it went out, not later.
func TestUnitStaleFlushLeavesRedeliveryAlone(t *testing.T) {
	w := newQueueWorld(t, "staleflush")
	_, s, c, id := w.deliverOne(t)
	first := c.expectDeliveries(t, 1, "first delivery")
	n, at := uint32(first.sent.Load()>>32), first.deliveredAt // what the writer keeps of this delivery

	w.clock.advance(time.Second)
	if err := s.Requeue(id, 0); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	if m := c.expectDeliveries(t, 2, "after REQ 0"); m.Attempts != 2 {
		t.Fatalf("redelivery has attempts %d, want 2", m.Attempts)
	}
	w.clock.advance(time.Second)
	first.markSent(n, at, w.clock.Now()) // the first delivery's frame is flushed only now

	w.dueAfter(t, c, unitMsgTimeout-time.Second, 3, "a msg_timeout after the redelivery")
}

func TestUnitTouchExtendsTimeout(t *testing.T) {
	w := newQueueWorld(t, "touch")
	ch, s, c, id := w.deliverOne(t)

	// TOUCH at 8s: the deadline becomes 18s.
	w.clock.advance(8 * time.Second)
	if err := s.Touch(id); err != nil {
		t.Fatalf("Touch: %v", err)
	}
	w.dueAfter(t, c, 10*time.Second, 2, "at the touched deadline")
	if n := ch.timeoutCount.Load(); n != 1 {
		t.Fatalf("%d timeouts, want 1", n)
	}
}

func TestUnitTouchCappedAtMaxMsgTimeout(t *testing.T) {
	w := newQueueWorld(t, "touchcap")
	_, s, c, id := w.deliverOne(t)

	// Touching every 5s would keep it forever; max-msg-timeout (30s after
	// delivery) ends it.
	for i := 1; i <= 5; i++ {
		w.clock.advance(5 * time.Second)
		if err := s.Touch(id); err != nil {
			t.Fatalf("Touch at %ds: %v", 5*i, err)
		}
	}
	w.dueAfter(t, c, 5*time.Second, 2, "at max-msg-timeout")
}

func TestUnitRequeueWithDelay(t *testing.T) {
	w := newQueueWorld(t, "req")
	ch, s, c, id := w.deliverOne(t)

	if err := s.Requeue(id, 5*time.Second); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	if n := ch.deferredCount.Load(); n != 1 {
		t.Fatalf("deferred count %d after REQ with delay, want 1", n)
	}
	if m := w.dueAfter(t, c, 5*time.Second, 2, "when the REQ delay ends"); m.ID != id || m.Attempts != 2 {
		t.Fatalf("redelivered %x attempts %d, want %x attempts 2", m.ID, m.Attempts, id)
	}
	if n := ch.deferredCount.Load(); n != 0 {
		t.Fatalf("deferred count %d after redelivery", n)
	}
	if n := ch.timeoutCount.Load(); n != 0 {
		t.Fatalf("a requeued message counted %d timeouts", n)
	}
}

func TestUnitDeferredPublish(t *testing.T) {
	w := newQueueWorld(t, "dpub")
	ch, s, c := w.subscribe(t, "c", 10)
	id := w.publish(t, "later", 3*time.Second)
	w.publish(t, "now", 0)
	if m := c.expectDeliveries(t, 1, "after publishing one deferred, one not"); string(m.Body) != "now" {
		t.Fatalf("delivered %q first, want the undeferred message", m.Body)
	}
	if n := ch.deferredCount.Load(); n != 1 {
		t.Fatalf("deferred count %d, want 1", n)
	}
	if m := w.dueAfter(t, c, 3*time.Second, 2, "when the DPUB is due"); m.ID != id {
		t.Fatalf("delivered %q, want the deferred message", m.Body)
	}
	if err := s.Finish(id); err != nil {
		t.Fatalf("FIN of the deferred message: %v", err)
	}
}

func TestUnitChannelPauseStopsDelivery(t *testing.T) {
	w := newQueueWorld(t, "chpause")
	ch, _, c := w.subscribe(t, "c", 10)
	ch.Pause()
	w.publish(t, "m", 0)
	c.expectDeliveries(t, 0, "publish to a paused channel")
	if d := ch.Depth(); d != 1 {
		t.Fatalf("paused channel depth %d, want 1", d)
	}
	ch.UnPause()
	c.expectDeliveries(t, 1, "after unpause")
	if d := ch.Depth(); d != 0 {
		t.Fatalf("depth %d after delivery", d)
	}
}

func TestUnitTopicPauseStopsDelivery(t *testing.T) {
	w := newQueueWorld(t, "tpause")
	ch, _, c := w.subscribe(t, "c", 10)
	w.topic.Pause()
	w.publish(t, "m", 0)
	c.expectDeliveries(t, 0, "publish to a paused topic")
	if d, cd := w.topic.Depth(), ch.Depth(); d != 1 || cd != 0 {
		t.Fatalf("paused topic depth %d, channel depth %d; want 1 and 0", d, cd)
	}
	// Unpausing starts the topic's drain goroutine, which delivers the
	// backlog and ends.
	w.topic.UnPause()
	w.topic.moveWG.Wait()
	c.expectDeliveries(t, 1, "after unpause")
	if d := w.topic.Depth(); d != 0 {
		t.Fatalf("topic depth %d after delivery", d)
	}
}

func TestUnitEphemeralChannelRetires(t *testing.T) {
	w := newQueueWorld(t, "gone#ephemeral")
	ch, s, _ := w.subscribe(t, "c#ephemeral", 1)
	_, s2, _ := w.subscribe(t, "c#ephemeral", 1)

	s.Unsubscribe()
	if _, ok := w.topic.GetExistingChannel("c#ephemeral"); !ok {
		t.Fatal("ephemeral channel deleted while a consumer remains")
	}
	s2.Unsubscribe()
	if _, ok := w.topic.GetExistingChannel("c#ephemeral"); ok {
		t.Fatal("ephemeral channel still there after its last consumer left")
	}
	select {
	case tp := <-w.retired:
		if tp != w.topic {
			t.Fatalf("lastChannelGone for %q", tp.name)
		}
	default:
		t.Fatal("ephemeral topic not retired after its last channel went")
	}
	if _, err := ch.Subscribe(&fakeConsumer{id: 9}, unitMsgTimeout, 0, 0); !errors.Is(err, errChannelClosed) {
		t.Fatalf("Subscribe to the retired channel: %v, want errChannelClosed", err)
	}
	if err := w.topic.Put([]entry{{msgCore: &msgCore{Body: []byte("late")}}}); !errors.Is(err, errExiting) {
		t.Fatalf("Put to the retired topic: %v, want errExiting", err)
	}
}

// TestUnitTimeoutCountsFromFlush: a message times out msg_timeout after
// its frame was flushed to the consumer, not after it went in flight: a
// frame that waited in the connection's buffer gets its whole timeout.
// Two messages delivered together, flushed 1 ms and 4 ms later, time out
// 1 ms and 4 ms after the plain deadline, each to the nanosecond.
func TestUnitTimeoutCountsFromFlush(t *testing.T) {
	w := newQueueWorld(t, "flush")
	ch, _, c := w.subscribe(t, "c", 2)
	w.publishBatch(t, 0, "a", "b")
	sent := c.expectDeliveries(t, 2, "after publish")
	a, b := c.deliveries()[0], sent
	w.advance(t, time.Millisecond)
	markFlushed(a.Message, w.clock.Now())
	w.advance(t, 3*time.Millisecond)
	markFlushed(b.Message, w.clock.Now())

	// At the plain deadline, delivery + msg_timeout, neither has had its
	// timeout since its flush.
	w.advance(t, unitMsgTimeout-4*time.Millisecond)
	if n := ch.timeoutCount.Load(); n != 0 {
		t.Fatalf("%d timeouts at delivery + msg_timeout, before any flush + msg_timeout", n)
	}
	if m := w.dueAfter(t, c, time.Millisecond, 3, "a's flush + msg_timeout"); string(m.Body) != "a" || m.Attempts != 2 {
		t.Fatalf("redelivered %q attempts %d, want a attempts 2", m.Body, m.Attempts)
	}
	// a's redelivery is in flight again: RDY 2 has room for b's.
	if m := w.dueAfter(t, c, 3*time.Millisecond, 4, "b's flush + msg_timeout"); string(m.Body) != "b" || m.Attempts != 2 {
		t.Fatalf("redelivered %q attempts %d, want b attempts 2", m.Body, m.Attempts)
	}
	if n := ch.timeoutCount.Load(); n != 2 {
		t.Fatalf("%d timeouts, want 2", n)
	}
}

// TestUnitClientMsgTimeout: a consumer's own msg_timeout (IDENTIFY) is its
// messages' timeout; another consumer keeps the default.
func TestUnitClientMsgTimeout(t *testing.T) {
	w := newQueueWorld(t, "own")
	_, _, short := w.subscribeWith(t, "short", 1, 2*time.Second)
	_, _, plain := w.subscribe(t, "plain", 1)
	w.publish(t, "m", 0)
	short.expectDeliveries(t, 1, "after publish")
	plain.expectDeliveries(t, 1, "after publish")
	w.dueAfter(t, short, 2*time.Second, 2, "the consumer's msg_timeout")
	w.dueAfter(t, plain, unitMsgTimeout-2*time.Second, 2, "the default msg_timeout")
	short.expectDeliveries(t, 6, "five of its timeouts by the default one")
}

// TestUnitRequeueNow: REQ without a delay puts the message back at once,
// behind what waits in memory (as NSQ does), with its attempts kept.
func TestUnitRequeueNow(t *testing.T) {
	w := newQueueWorld(t, "reqnow")
	ch, s, c := w.subscribe(t, "c", 1)
	ids := w.publishBatch(t, 0, "first", "second")
	c.expectDeliveries(t, 1, "RDY 1")
	if err := s.Requeue(ids[0], 0); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	if m := c.expectDeliveries(t, 2, "after REQ 0"); string(m.Body) != "second" {
		t.Fatalf("after REQ 0 delivered %q, want second, which waited", m.Body)
	}
	if err := s.Finish(ids[1]); err != nil {
		t.Fatalf("FIN: %v", err)
	}
	if m := c.expectDeliveries(t, 3, "after FIN"); string(m.Body) != "first" || m.Attempts != 2 {
		t.Fatalf("after FIN delivered %q attempts %d, want first attempts 2", m.Body, m.Attempts)
	}
	if d, n := ch.deferredCount.Load(), ch.requeueCount.Load(); d != 0 || n != 1 {
		t.Fatalf("deferred %d requeues %d, want 0 and 1", d, n)
	}
}

// TestUnitUnsubscribeReturnsInFlight: a consumer that leaves gives its
// messages in flight back at once, at the head of the queue, rather than
// after their timeout; they count as no timeout.
func TestUnitUnsubscribeReturnsInFlight(t *testing.T) {
	w := newQueueWorld(t, "leave")
	ch, gone, _ := w.subscribe(t, "c", 2)
	_, s, next := w.subscribe(t, "c", 0)
	w.publishBatch(t, 0, "a", "b", "c")
	gone.Unsubscribe()
	next.expectDeliveries(t, 0, "RDY 0")
	s.SetReady(3)
	got := next.bodies()
	if len(got) != 3 || got[2] != "c" || !slices.Contains(got[:2], "a") || !slices.Contains(got[:2], "b") {
		t.Fatalf("after the first consumer left: delivered %v, want a and b (in any order), then c", got)
	}
	for _, m := range next.deliveries()[:2] {
		if m.Attempts != 2 {
			t.Fatalf("%q returned with attempts %d, want 2", m.Body, m.Attempts)
		}
	}
	if n := ch.timeoutCount.Load(); n != 0 {
		t.Fatalf("%d timeouts for messages given back by a consumer that left", n)
	}
}

// TestUnitTouchRefused: only the consumer a message is in flight to may
// touch it, and only while it is in flight.
func TestUnitTouchRefused(t *testing.T) {
	w := newQueueWorld(t, "touchno")
	_, s, _, id := w.deliverOne(t)
	_, other, _ := w.subscribe(t, "c", 1)
	if err := other.Touch(id); !errors.Is(err, errNotOwner) {
		t.Fatalf("TOUCH by another consumer: %v, want errNotOwner", err)
	}
	if err := s.Finish(id); err != nil {
		t.Fatalf("FIN: %v", err)
	}
	if err := s.Touch(id); !errors.Is(err, errNotInFlight) {
		t.Fatalf("TOUCH after FIN: %v, want errNotInFlight", err)
	}
}

// TestUnitTimeoutWhilePaused: a message in flight on a paused channel
// still times out on time, and waits in the queue until the channel is
// unpaused.
func TestUnitTimeoutWhilePaused(t *testing.T) {
	w := newQueueWorld(t, "pausedto")
	ch, _, c, _ := w.deliverOne(t)
	ch.Pause()
	w.advance(t, unitMsgTimeout-time.Nanosecond)
	if n := ch.timeoutCount.Load(); n != 0 {
		t.Fatalf("%d timeouts before msg_timeout", n)
	}
	w.advance(t, time.Nanosecond)
	if n, d := ch.timeoutCount.Load(), ch.Depth(); n != 1 || d != 1 {
		t.Fatalf("at msg_timeout on a paused channel: %d timeouts, depth %d; want 1 and 1", n, d)
	}
	c.expectDeliveries(t, 1, "paused")
	ch.UnPause()
	if m := c.expectDeliveries(t, 2, "after unpause"); m.Attempts != 2 {
		t.Fatalf("redelivered with attempts %d, want 2", m.Attempts)
	}
}

// markFlushed reports m's current delivery flushed at (unix ns), as the
// writer does after its flush.
func markFlushed(m *Message, at int64) {
	m.markSent(uint32(m.sent.Load()>>32), m.deliveredAt, at)
}
