package nsqd

// Tests of Topic and Channel on their own: no daemon, no socket, a fake
// Consumer and a fake clock that only moves when the test advances it, so
// timeouts, TOUCH, REQ delays and deferral are checked to the nanosecond
// without waiting for them.

import (
	"encoding/binary"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"
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

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()}
}

func (c *fakeClock) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) clockTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now + int64(d), f: f, active: true}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.at, t.active = t.c.now+int64(d), true
	return was
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
	delivered []*Message
	closed    bool
	sendDue   bool  // Deliver asked for Send
	sends     []int // deliveries made when each Send came
}

func (c *fakeConsumer) ID() int64 { return c.id }

func (c *fakeConsumer) Deliver(m *Message) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.delivered = append(c.delivered, m)
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

// deliveries is a copy of what was delivered so far.
func (c *fakeConsumer) deliveries() []*Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.delivered)
}

// expectDeliveries fails the test unless exactly n messages were delivered,
// and returns the last.
func (c *fakeConsumer) expectDeliveries(t *testing.T, n int, when string) *Message {
	t.Helper()
	got := c.deliveries()
	if len(got) != n {
		t.Fatalf("%s: %d deliveries, want %d", when, len(got), n)
	}
	if n == 0 {
		return nil
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
	nextID  uint64
}

func newQueueWorld(t *testing.T, topicName string) *queueWorld {
	t.Helper()
	w := &queueWorld{clock: newFakeClock(), retired: make(chan *Topic, 1)}
	w.cfg = &queueConfig{
		dataPath:        t.TempDir(),
		memQueueSize:    100,
		maxBytesPerFile: 1 << 20,
		syncEvery:       100,
		syncTimeout:     time.Second,
		maxMsgSize:      1 << 20,
		msgTimeout:      unitMsgTimeout,
		maxMsgTimeout:   unitMaxMsgTimeout,
		logger:          slog.New(slog.DiscardHandler),
		clock:           w.clock,
	}
	tp, err := newTopic(topicName, w.cfg, topicHooks{lastChannelGone: func(tp *Topic) { w.retired <- tp }}, time.Minute, nil)
	if err != nil {
		t.Fatalf("newTopic: %v", err)
	}
	w.topic = tp
	t.Cleanup(func() {
		if err := tp.close(true); err != nil {
			t.Errorf("closing topic: %v", err)
		}
	})
	return w
}

// subscribe creates channel (if needed) and a consumer subscribed to it
// with the default message timeout and the given RDY.
func (w *queueWorld) subscribe(t *testing.T, channel string, rdy int64) (*Channel, *Subscription, *fakeConsumer) {
	t.Helper()
	ch, err := w.topic.GetChannel(channel)
	if err != nil {
		t.Fatalf("GetChannel: %v", err)
	}
	c := &fakeConsumer{id: int64(len(ch.subs) + 1)}
	s, err := ch.Subscribe(c, unitMsgTimeout, 0, 0)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	s.SetReady(rdy)
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

// dueAfter advances the clock by d in two steps and checks that c's nth
// delivery comes exactly at d, not a nanosecond before; it returns it.
func (w *queueWorld) dueAfter(t *testing.T, c *fakeConsumer, d time.Duration, n int, what string) *Message {
	t.Helper()
	w.clock.advance(d - time.Nanosecond)
	c.expectDeliveries(t, n-1, "1ns before "+what)
	w.clock.advance(time.Nanosecond)
	return c.expectDeliveries(t, n, what)
}

// publish puts one message in the topic, deferred by deferFor, as
// NSQD.publish would.
func (w *queueWorld) publish(t *testing.T, body string, deferFor time.Duration) MessageID {
	t.Helper()
	w.nextID++
	m := &Message{Body: []byte(body), Timestamp: w.clock.Now()}
	binary.BigEndian.PutUint64(m.ID[8:], w.nextID)
	if deferFor > 0 {
		m.deferUntil = m.Timestamp + int64(deferFor)
	}
	id := m.ID
	if err := w.topic.Put([]*Message{m}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	return id
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
	m.markSent(m.deliveredAt, m.deliveredAt+int64(waited)) // as the writer does after its flush
	w.dueAfter(t, c, unitMsgTimeout+waited, 2, "msg_timeout after the flush")
	w.dueAfter(t, c, unitMsgTimeout, 3, "msg_timeout after the second delivery")
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
	if err := w.topic.Put([]*Message{{Body: []byte("late")}}); !errors.Is(err, errExiting) {
		t.Fatalf("Put to the retired topic: %v, want errExiting", err)
	}
}
