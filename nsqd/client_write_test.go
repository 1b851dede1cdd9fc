package nsqd

import (
	"encoding/binary"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// countingConn counts the writes made to it: each is one write syscall.
type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// loopbackClient is a client on a loopback connection whose writes are
// counted; peer is the other end.
func loopbackClient(t *testing.T) (c *client, conn *countingConn, peer net.Conn) {
	t.Helper()
	o := NewOptions()
	server, peer := loopbackPair(t)
	conn = &countingConn{Conn: server}
	c = newClient(1, newFakeDaemon(t, o, nil), conn)
	t.Cleanup(func() {
		c.close()
		c.writeMu.Lock() // the writer holds it until it returns
		//lint:ignore SA2001 taking the lock is the wait
		c.writeMu.Unlock()
	})
	return c, conn, peer
}

// readFrames reads n message frames from peer and returns their bodies.
func readFrames(t *testing.T, peer net.Conn, n int) []string {
	t.Helper()
	if err := peer.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for range n {
		var hdr [8]byte
		if _, err := io.ReadFull(peer, hdr[:]); err != nil {
			t.Fatalf("frame %d of %d: %v", len(bodies)+1, n, err)
		}
		data := make([]byte, binary.BigEndian.Uint32(hdr[:4])-4)
		if _, err := io.ReadFull(peer, data); err != nil {
			t.Fatalf("frame %d of %d: %v", len(bodies)+1, n, err)
		}
		bodies = append(bodies, string(data[messageHeaderLen:]))
	}
	return bodies
}

// TestBatchSharesOneWrite: the messages a channel delivers to a consumer
// in one critical section (here one publish of a batch) reach the socket
// in one write, not one per message as they would if a writer started at
// the first and raced the channel's delivery of the rest.
func TestBatchSharesOneWrite(t *testing.T) {
	const batch = 40
	w := newQueueWorld(t, "t")
	ch, err := w.topic.GetChannel("c")
	if err != nil {
		t.Fatal(err)
	}
	c, conn, peer := loopbackClient(t)
	s, err := ch.Subscribe(c, unitMsgTimeout, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	s.SetReady(batch)
	for round := 1; round <= 3; round++ {
		before := conn.writes.Load()
		bodies := make([][]byte, batch)
		for i := range bodies {
			bodies[i] = []byte{'m', byte(i)}
		}
		ids, err := w.put(bodies, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range readFrames(t, peer, batch) {
			if b != string([]byte{'m', byte(i)}) {
				t.Fatalf("round %d: frame %d is %q", round, i, b)
			}
		}
		if n := conn.writes.Load() - before; n != 1 {
			t.Errorf("round %d: %d messages delivered at once took %d writes, want 1", round, batch, n)
		}
		for _, id := range ids {
			if err := s.Finish(id); err != nil {
				t.Fatalf("round %d: FIN: %v", round, err)
			}
		}
	}
}

// TestSendAfterTheBatch: the channel asks each consumer it delivered to
// for Send once, when the critical section's deliveries are done, however
// many messages it delivered; a consumer whose writer is already due is
// not asked again.
func TestSendAfterTheBatch(t *testing.T) {
	w := newQueueWorld(t, "t")
	_, _, a := w.subscribe(t, "c", 100)
	_, _, b := w.subscribe(t, "c", 100)
	bodies := make([][]byte, 10)
	for i := range bodies {
		bodies[i] = []byte("m")
	}
	if _, err := w.put(bodies, 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*fakeConsumer{a, b} {
		if got := c.sendsAt(); len(got) != 1 || got[0] != 5 {
			t.Errorf("consumer %d: Send after deliveries %v, want once, after all 5", c.id, got)
		}
	}
}
