package nsqd

// The protocol's timing commands over a real connection to a fake daemon
// whose topic lives on a fake clock: the wire says what the command
// means, the clock says exactly when it takes effect.

import (
	"net"
	"sync"
	"testing"
	"time"
)

// newSession is a queueWorld with topic "t" and a client connected to a
// fake daemon serving it, with the world's message timeouts.
func newSession(t *testing.T, mutate func(*Options)) (*queueWorld, *fakeDaemon, *v2conn) {
	t.Helper()
	w := newQueueWorld(t, "t")
	o := NewOptions()
	o.MsgTimeout, o.MaxMsgTimeout = unitMsgTimeout, unitMaxMsgTimeout
	if mutate != nil {
		mutate(o)
	}
	d := newFakeDaemon(t, o, w)
	return w, d, d.dial(t)
}

// barrier returns once the server has executed every command sent
// before it: a FIN of an ID never delivered is answered with an error
// that does not end the connection.
func (c *v2conn) barrier() {
	c.t.Helper()
	c.send("FIN 0000000000000000")
	c.expectError("E_FIN_FAILED")
}

// sessionMessage subscribes c to t/c with RDY 1 and returns the message the
// test then publishes, as c received it, and the channel.
func (w *queueWorld) sessionMessage(t *testing.T, c *v2conn) (*Channel, v2msg) {
	t.Helper()
	c.sub("t", "c")
	c.send("RDY 1")
	c.barrier()
	w.publish(t, "m", 0)
	ch, _ := w.topic.GetExistingChannel("c")
	return ch, c.expectMsg()
}

// TestSessionTouch: TOUCH over the wire restarts the message's timeout
// from the moment it arrives, up to --max-msg-timeout after delivery.
func TestSessionTouch(t *testing.T) {
	w, _, c := newSession(t, nil)
	ch, m := w.sessionMessage(t, c)
	w.advance(t, 8*time.Second)
	c.send("TOUCH " + m.id)
	c.barrier()
	w.advance(t, unitMsgTimeout-time.Nanosecond)
	if n := ch.timeoutCount.Load(); n != 0 {
		t.Fatalf("%d timeouts 1ns before the touched deadline", n)
	}
	w.advance(t, time.Nanosecond)
	if n := ch.timeoutCount.Load(); n != 1 {
		t.Fatalf("%d timeouts at the touched deadline, want 1", n)
	}
	again := c.expectMsg()
	if again.id != m.id || again.attempts != 2 {
		t.Fatalf("redelivered %s attempts %d, want %s attempts 2", again.id, again.attempts, m.id)
	}

	// Touched every 5s, the redelivery still times out at delivery +
	// --max-msg-timeout.
	for range unitMaxMsgTimeout/(5*time.Second) - 1 {
		w.advance(t, 5*time.Second)
		c.send("TOUCH " + m.id)
		c.barrier()
	}
	w.advance(t, 5*time.Second-time.Nanosecond)
	if n := ch.timeoutCount.Load(); n != 1 {
		t.Fatalf("%d timeouts 1ns before max-msg-timeout, want 1", n)
	}
	w.advance(t, time.Nanosecond)
	if n := ch.timeoutCount.Load(); n != 2 {
		t.Fatalf("%d timeouts at max-msg-timeout despite TOUCH, want 2", n)
	}
}

// TestSessionRequeueDelay: REQ's timeout is in milliseconds, and one past
// --max-req-timeout is clamped to it.
func TestSessionRequeueDelay(t *testing.T) {
	w, _, c := newSession(t, func(o *Options) { o.MaxReqTimeout = time.Hour })
	ch, m := w.sessionMessage(t, c)
	c.send("REQ " + m.id + " 300")
	c.barrier()
	if n := ch.deferredCount.Load(); n != 1 {
		t.Fatalf("deferred count %d after REQ with a delay, want 1", n)
	}
	w.advance(t, 300*time.Millisecond-time.Nanosecond)
	if n := ch.deferredCount.Load(); n != 1 {
		t.Fatalf("deferred count %d 1ns before the REQ's 300ms, want 1", n)
	}
	w.advance(t, time.Nanosecond)
	if again := c.expectMsg(); again.id != m.id || again.attempts != 2 {
		t.Fatalf("redelivered %s attempts %d, want %s attempts 2", again.id, again.attempts, m.id)
	}

	c.send("REQ " + m.id + " 86400000") // a day: clamped to the hour
	c.barrier()
	w.advance(t, time.Hour-time.Nanosecond)
	if n := ch.deferredCount.Load(); n != 1 {
		t.Fatalf("deferred count %d 1ns before --max-req-timeout, want 1", n)
	}
	w.advance(t, time.Nanosecond)
	if again := c.expectMsg(); again.attempts != 3 {
		t.Fatalf("redelivered with attempts %d, want 3", again.attempts)
	}
}

// TestSessionDeferredPublish: DPUB's delay is in milliseconds.
func TestSessionDeferredPublish(t *testing.T) {
	w, _, c := newSession(t, nil)
	_, _, consumer := w.subscribe(t, "c", 1)
	c.send("DPUB t 1500", []byte("later"))
	c.expectResponse("OK")
	w.dueAfter(t, consumer, 1500*time.Millisecond, 1, "the DPUB's 1500ms")
}

// TestSessionIdentifyMsgTimeout: an IDENTIFY msg_timeout is the timeout of
// the client's messages.
func TestSessionIdentifyMsgTimeout(t *testing.T) {
	w, d, c := newSession(t, nil)
	c.identify(map[string]any{"msg_timeout": 2000})
	ch, m := w.sessionMessage(t, c)
	if subs := d.subscriptions(); len(subs) != 1 || subs[0].msgTimeout != 2*time.Second {
		t.Fatalf("subscriptions %+v, want one with msg_timeout 2s", subs)
	}
	w.advance(t, 2*time.Second-time.Nanosecond)
	if n := ch.timeoutCount.Load(); n != 0 {
		t.Fatalf("%d timeouts before the client's msg_timeout", n)
	}
	// The real connection's flush counts as 1µs after the delivery
	// (newFakeClock): the timeout is at 2s + 1µs.
	w.advance(t, time.Microsecond+time.Nanosecond)
	if again := c.expectMsg(); again.id != m.id || again.attempts != 2 || ch.timeoutCount.Load() != 1 {
		t.Fatalf("redelivered %s attempts %d, %d timeouts; want %s attempts 2 after one timeout",
			again.id, again.attempts, ch.timeoutCount.Load(), m.id)
	}
}

// deadlineConn records the deadlines the connection code sets.
type deadlineConn struct {
	net.Conn
	mu          sync.Mutex
	read, write time.Time // the last ones set
}

func (c *deadlineConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.read, c.write = t, t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.read = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *deadlineConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.write = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

func (c *deadlineConn) deadlines() (read, write time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.read, c.write
}

// TestHeartbeatsDisabledClearDeadlines: with heartbeat_interval -1 the
// connection has no read or write deadline, not even the ones armed
// before IDENTIFY.
func TestHeartbeatsDisabledClearDeadlines(t *testing.T) {
	w := newQueueWorld(t, "hb")
	o := NewOptions()
	o.ClientTimeout = time.Second // default heartbeat 500 ms
	var conn *deadlineConn
	c := newFakeDaemon(t, o, w).dialConn(t, func(nc net.Conn) net.Conn {
		conn = &deadlineConn{Conn: nc}
		return conn
	})
	c.pub("hb", "x") // arms a 500 ms write deadline for the reply
	if r, wr := conn.deadlines(); r.IsZero() || wr.IsZero() {
		t.Fatalf("with heartbeats: read deadline %v, write deadline %v; want both set", r, wr)
	}
	c.send("IDENTIFY", []byte(`{"heartbeat_interval":-1}`))
	c.expectResponse("OK")
	c.pub("hb", "y")
	if r, wr := conn.deadlines(); !r.IsZero() || !wr.IsZero() {
		t.Fatalf("heartbeats disabled: read deadline %v, write deadline %v; want none", r, wr)
	}
}
