package nsqd

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nsqgo/nsq/internal/wire"
)

// The write side of a client connection: message frames queued by Deliver
// (under a channel's lock) wait in the outbox until a short-lived writer
// goroutine writes them through the connection's fixed-size buffered
// writer and flushes once the outbox is empty, so a burst goes out in as
// few syscalls as the buffer allows and an idle connection has no writer.
// The channel starts the writer (Send) when its critical section has
// delivered everything it had for the client, so a batch delivered at once
// is one write; nothing waits on a timer, so the last frame of a burst
// goes out as soon as it is written. (NSQ holds frames up to the client's
// output_buffer_timeout, 250 ms by default, which is where its latency at
// low rates comes from.)
//
// Every write syscall gets its own deadline (stallConn): the deadline bounds
// how long the client may stall, not how long a large batch takes to send
// to a slow but steady reader.

// frameHeaderLen is a message frame up to its body: [size][frame type] and
// the message header.
const frameHeaderLen = 8 + messageHeaderLen

// outChunkLen is how many frames an outbox chunk holds (64 × 80 B = 5 KiB).
const outChunkLen = 64

// outMsg is a message frame waiting to be written: its header encoded at
// delivery, under the channel lock, because the Message's delivery state
// (attempts) changes when it is redelivered — possibly while this copy
// still waits here — and the body, immutable and shared. msg, delivery
// and deliveredAt are for telling the message when the frame of this
// delivery was flushed (Message.markSent), the one thing the writer may
// set on it.
type outMsg struct {
	hdr         [frameHeaderLen]byte
	delivery    uint32
	body        []byte
	msg         *Message
	deliveredAt int64
}

// outChunk is a piece of the outbox. The outbox is a list of fixed-size
// chunks borrowed from a pool while messages wait: it never grows by
// copying (a slice of frames that doubles as a RDY 2500 window fills cost a
// third of the daemon's CPU in memmove and page faults), a burst of any size
// changes hands in O(1), and an idle connection holds no chunk.
type outChunk struct {
	n    int
	next *outChunk
	msgs [outChunkLen]outMsg
}

var outChunkPool = sync.Pool{New: func() any { return new(outChunk) }}

// Deliver implements Consumer: queue m, and ask for Send when no writer
// runs or is due to start. It is called with the channel's lock held, so
// it only copies what it needs.
func (c *client) Deliver(m *Message) (send bool) {
	c.messageCount.Add(1)
	c.outMu.Lock()
	tail := c.outTail
	if tail == nil || tail.n == outChunkLen {
		next := outChunkPool.Get().(*outChunk)
		if tail == nil {
			c.outHead = next
		} else {
			tail.next = next
		}
		c.outTail, tail = next, next
	}
	om := &tail.msgs[tail.n]
	tail.n++
	encodeMessageFrame(&om.hdr, m)
	om.body, om.msg, om.deliveredAt = m.Body, m, m.deliveredAt
	om.delivery = uint32(m.sent.Load() >> 32)
	send = !c.writing
	c.writing = true
	c.outMu.Unlock()
	return send
}

// Send implements Consumer: start the writer that Deliver asked for.
func (c *client) Send() { go c.writeOutbox() }

// encodeMessageFrame fills hdr with the frame size, the message frame type
// and m's header; the body follows on the wire.
func encodeMessageFrame(hdr *[frameHeaderLen]byte, m *Message) {
	size := uint32(4 + messageHeaderLen + len(m.Body))
	hdr[0], hdr[1], hdr[2], hdr[3] = byte(size>>24), byte(size>>16), byte(size>>8), byte(size)
	hdr[4], hdr[5], hdr[6], hdr[7] = 0, 0, 0, byte(wire.FrameTypeMessage)
	m.putHeader((*[messageHeaderLen]byte)(hdr[8:]), m.Attempts)
}

// writeOutbox writes what is queued, then what was queued meanwhile, and
// flushes when it finds the outbox empty: frames queued while it writes
// share its writes (so a burst costs as few syscalls as the buffer
// allows), and the last frame is flushed as soon as it is written. The
// chunks it has written wait in written until the flush, which tells
// their messages when they were sent.
func (c *client) writeOutbox() {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	var written outList
	for {
		c.outMu.Lock()
		head := c.outHead
		c.outHead, c.outTail = nil, nil
		if head == nil {
			c.writing = false
			c.outMu.Unlock()
			sent := c.flushLocked() == nil && !c.closed.Load()
			written.release(sent, time.Now().UnixNano())
			return
		}
		c.outMu.Unlock()
		for chunk := head; chunk != nil; {
			for i := range chunk.msgs[:chunk.n] {
				if !c.closed.Load() {
					c.writeMessageLocked(&chunk.msgs[i])
				}
			}
			next := chunk.next
			written.push(chunk)
			chunk = next
		}
	}
}

// outList is a list of outbox chunks.
type outList struct{ head, tail *outChunk }

// push appends chunk.
func (l *outList) push(chunk *outChunk) {
	chunk.next = nil
	if l.tail == nil {
		l.head = chunk
	} else {
		l.tail.next = chunk
	}
	l.tail = chunk
}

// release returns every chunk to the pool; when sent, it first tells each
// message that its frame was flushed at now.
func (l *outList) release(sent bool, now int64) {
	for chunk := l.head; chunk != nil; {
		for i := range chunk.msgs[:chunk.n] {
			om := &chunk.msgs[i]
			if sent {
				om.msg.markSent(om.delivery, om.deliveredAt, now)
			}
			*om = outMsg{}
		}
		next := chunk.next
		chunk.n, chunk.next = 0, nil
		outChunkPool.Put(chunk)
		chunk = next
	}
	*l = outList{}
}

// writeMessageLocked writes one message frame: its 34-byte header and the
// shared body, through the fixed-size buffered writer (which writes a body
// larger than its free space straight through), never copying the body into
// a buffer of its own.
func (c *client) writeMessageLocked(m *outMsg) {
	if c.d.logger().Enabled(context.Background(), slog.LevelDebug) {
		c.logf(slog.LevelDebug, "PROTOCOL(V2): writing msg(%s) to client(%s) - %s", m.msg.ID[:], c.remoteAddr, m.body)
	}
	if _, err := c.writer.Write(m.hdr[:]); err != nil {
		c.fail(err)
		return
	}
	if _, err := c.writer.Write(m.body); err != nil {
		c.fail(err)
	}
}

// sendFrame writes a non-message frame and flushes at once.
func (c *client) sendFrame(frameType int32, data []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	return c.sendLocked(frameType, data)
}

// sendLocked writes a frame and flushes; writeMu is held.
func (c *client) sendLocked(frameType int32, data []byte) error {
	if err := wire.WriteFrame(c.writer, frameType, data); err != nil {
		return err
	}
	return c.flushLocked()
}

func (c *client) flushLocked() error {
	if c.writer.Buffered() == 0 && (c.tr.comp == nil || !c.tr.comp.pending()) {
		return nil
	}
	if err := c.writer.Flush(); err != nil {
		c.fail(err)
		return err
	}
	if err := c.flushCompressorLocked(); err != nil {
		c.fail(err)
		return err
	}
	return nil
}

// stallChunk is the most a single write syscall is given: a client must
// take this much within one write timeout to keep its connection.
const stallChunk = 64 << 10

// stallConn is a connection whose every write syscall gets a fresh write
// deadline of timeout, so that the deadline bounds a stall (no progress for
// timeout) rather than the time a whole batch takes: a consumer reading
// 20 KB messages at 1 MB/s stays connected however large its RDY window,
// one that stops reading is cut off a timeout after its socket buffers
// fill. Writes larger than stallChunk are split so that each piece gets its
// own deadline. Writes are serialised by the client's writeMu (and, under
// TLS, by the TLS connection's own lock).
type stallConn struct {
	net.Conn
	timeout atomic.Int64 // time.Duration; <= 0: no write deadline
	armed   atomic.Bool  // a write deadline is set on Conn
}

func newStallConn(conn net.Conn, timeout time.Duration) *stallConn {
	s := &stallConn{Conn: conn}
	s.timeout.Store(int64(timeout))
	return s
}

// setTimeout changes the deadline given to the next write syscalls.
func (s *stallConn) setTimeout(d time.Duration) { s.timeout.Store(int64(d)) }

func (s *stallConn) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		piece := p[:min(len(p), stallChunk)]
		s.arm()
		k, err := s.Conn.Write(piece)
		n += k
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// arm sets the deadline for the write syscall about to be made: one clock
// read and one runtime timer update per syscall, not per message.
func (s *stallConn) arm() {
	if d := time.Duration(s.timeout.Load()); d > 0 {
		_ = s.Conn.SetWriteDeadline(time.Now().Add(d))
		s.armed.Store(true)
	} else if s.armed.Swap(false) {
		_ = s.Conn.SetWriteDeadline(time.Time{})
	}
}

// startHeartbeats arms the heartbeat timer (not reset by traffic, as NSQ).
func (c *client) startHeartbeats() {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.startHeartbeatsLocked()
}

// setHeartbeatInterval applies an IDENTIFY heartbeat_interval, which is
// also the write timeout: the old timer stops (a callback of it already
// running finds itself replaced and does nothing), and with heartbeats
// disabled writes get no deadline.
func (c *client) setHeartbeatInterval(d time.Duration) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.heartbeatInterval = d
	c.sock.setTimeout(d)
	if c.heartbeat != nil {
		c.heartbeat.Stop()
		c.heartbeat = nil
	}
	c.startHeartbeatsLocked()
}

// startHeartbeatsLocked arms a new timer; c.writeMu is held. The heartbeat
// fields and heartbeatInterval are written only with c.writeMu held, so
// every goroutine but the reader reads them under c.writeMu.
func (c *client) startHeartbeatsLocked() {
	if c.heartbeatInterval <= 0 {
		return
	}
	c.heartbeatGen++
	gen := c.heartbeatGen
	c.heartbeat = time.AfterFunc(c.heartbeatInterval, func() { c.onHeartbeat(gen) })
}

// onHeartbeat runs on timer number gen; a replaced or stopped timer whose
// callback was already on its way does nothing.
func (c *client) onHeartbeat(gen uint64) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	t := c.heartbeat
	if c.closed.Load() || t == nil || gen != c.heartbeatGen {
		return
	}
	c.idleTickLocked()
	if err := wire.WriteFrame(c.writer, wire.FrameTypeResponse, wire.Heartbeat); err != nil {
		c.fail(err)
		return
	}
	if c.flushLocked() != nil {
		return
	}
	t.Reset(c.heartbeatInterval)
}

// stopHeartbeats stops the timer for good (the connection is ending).
func (c *client) stopHeartbeats() {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if c.heartbeat != nil {
		c.heartbeat.Stop()
		c.heartbeat = nil
	}
}

// setOutputBuffer replaces the write buffer after IDENTIFY. Only called
// before any message can be queued.
func (c *client) setOutputBuffer(size int) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.outputBufferSize = size
	c.writer = bufio.NewWriterSize(c.streamWriter(), size)
}
