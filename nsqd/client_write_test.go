package nsqd

import (
	"io"
	"testing"
	"time"
)

// pacedClient is a client on a loopback connection, subscribed with a RDY
// window of rdy and output_buffer_timeout bufTimeout; peer is the other
// end.
func pacedClient(t *testing.T, rdy int64, bufTimeout time.Duration) *client {
	t.Helper()
	o := NewOptions()
	o.OutputBufferTimeout = bufTimeout
	server, peer := loopbackPair(t)
	go func() { _, _ = io.Copy(io.Discard, peer) }()
	c := newClient(1, newFakeDaemon(t, o, nil), server)
	sub := &Subscription{consumer: c}
	sub.rdy.Store(rdy)
	c.subscribed.Store(&clientSubscription{sub: sub})
	t.Cleanup(func() {
		c.close()
		c.writeMu.Lock() // the writer holds it until it returns
		//lint:ignore SA2001 taking the lock is the wait
		c.writeMu.Unlock()
	})
	return c
}

// TestFlushPacing: buffered frames are held back only on a connection that
// flushed less than the pace ago and whose client has room for more; the
// pace is output_buffer_timeout, at most maxFlushPace.
func TestFlushPacing(t *testing.T) {
	c := pacedClient(t, 100, 250*time.Millisecond)
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if d := c.holdFor(); d != 0 {
		t.Fatalf("nothing buffered, yet held for %v", d)
	}
	if _, err := c.writer.Write([]byte("frame")); err != nil {
		t.Fatal(err)
	}
	if d := c.holdFor(); d > 0 {
		t.Fatalf("a connection that never flushed is held for %v", d)
	}
	c.pace.lastFlush = time.Now()
	if d := c.holdFor(); d <= 0 || d > maxFlushPace {
		t.Fatalf("busy connection held for %v, want (0, %v]", d, maxFlushPace)
	}
	c.pace.lastFlush = time.Now().Add(-maxFlushPace)
	if d := c.holdFor(); d > 0 {
		t.Fatalf("connection quiet for the pace held for %v", d)
	}

	c.pace.lastFlush = time.Now()
	c.subscribed.Load().sub.inFlight.Store(100)
	if d := c.holdFor(); d != 0 {
		t.Fatalf("client with a full RDY window held for %v", d)
	}
	c.subscribed.Load().sub.inFlight.Store(0)
	c.outputBufTimeout = 0 // output_buffer_timeout -1: no buffering
	if d := c.holdFor(); d != 0 {
		t.Fatalf("client without output buffering held for %v", d)
	}
	c.outputBufTimeout = 2 * time.Millisecond
	if d := c.holdFor(); d <= 0 || d > 2*time.Millisecond {
		t.Fatalf("held for %v, want at most the client's output_buffer_timeout", d)
	}
}

// TestFlushPacingWakes: a held writer is woken when a full chunk of frames
// is queued (a stream), or when the client's window fills.
func TestFlushPacingWakes(t *testing.T) {
	woken := func(c *client) bool {
		select {
		case <-c.pace.wake:
			return true
		default:
			return false
		}
	}
	hold := func(c *client) {
		c.outMu.Lock()
		c.writing = true // a writer is holding: Deliver starts none
		c.pace.startHold()
		c.outMu.Unlock()
	}
	msg := &Message{ID: MessageID{'1'}, Body: []byte("b")}

	c := pacedClient(t, 1000, 250*time.Millisecond)
	hold(c)
	for range outChunkLen - 1 {
		c.Deliver(msg)
	}
	if woken(c) {
		t.Fatal("woken before a chunk was full")
	}
	c.Deliver(msg)
	if !woken(c) {
		t.Fatalf("not woken by %d queued frames", outChunkLen)
	}

	c = pacedClient(t, 2, 250*time.Millisecond)
	hold(c)
	c.subscribed.Load().sub.inFlight.Store(1)
	c.Deliver(msg)
	if woken(c) {
		t.Fatal("woken with room left in the window")
	}
	c.subscribed.Load().sub.inFlight.Store(2)
	c.Deliver(msg)
	if !woken(c) {
		t.Fatal("not woken when the window filled")
	}
}
