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
// still waits here — and the body, immutable and shared. msg and
// deliveredAt are for telling the message when its frame was flushed
// (Message.markSent), the one thing the writer may set on it.
type outMsg struct {
	hdr         [frameHeaderLen]byte
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

// Deliver implements Consumer: queue m and make sure a writer runs. It is
// called with the channel's lock held, so it only copies what it needs.
func (c *client) Deliver(m *Message) {
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
	c.pace.queued++
	start := !c.writing
	c.writing = true
	wake := c.pace.holding && c.pace.queued >= outChunkLen
	holding := c.pace.holding
	c.outMu.Unlock()
	switch {
	case start:
		go c.writeOutbox()
	case wake || holding && c.windowFull():
		c.pace.wakeWriter()
	}
}

// encodeMessageFrame fills hdr with the frame size, the message frame type
// and m's header; the body follows on the wire.
func encodeMessageFrame(hdr *[frameHeaderLen]byte, m *Message) {
	size := uint32(4 + messageHeaderLen + len(m.Body))
	hdr[0], hdr[1], hdr[2], hdr[3] = byte(size>>24), byte(size>>16), byte(size>>8), byte(size)
	hdr[4], hdr[5], hdr[6], hdr[7] = 0, 0, 0, byte(wire.FrameTypeMessage)
	m.encodeHeader((*[messageHeaderLen]byte)(hdr[8:]))
}

// writeOutbox sends queued messages and flushes once the outbox is empty,
// or, on a busy connection, somewhat later (flushPacer). The chunks it has
// written wait in written until the flush, which tells their messages when
// they were sent.
func (c *client) writeOutbox() {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	var written outList
	held := false
	for {
		c.outMu.Lock()
		c.pace.holding = false
		head := c.outHead
		c.outHead, c.outTail, c.pace.queued = nil, nil, 0
		if head == nil {
			if d := c.holdFor(); d > 0 && !held {
				// Frames delivered meanwhile join these; writing stays
				// set, so they start no writer of their own.
				held = true
				c.pace.startHold()
				c.outMu.Unlock()
				c.writeMu.Unlock()
				c.pace.wait(d)
				c.writeMu.Lock()
				continue
			}
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
				om.msg.markSent(om.deliveredAt, now)
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

// flushPacer spaces the flushes of a busy connection. A connection that
// receives a few messages at a time (burt: 24 topics, 5 consumers each,
// MPUBs of 10) paid a write syscall, and its client a read, for every one
// or two messages. When the outbox empties less than the pace after the
// last flush, the writer keeps the frames in the buffer and waits until
// the pace has passed, so the deliveries that come meanwhile share the
// write. It flushes at once on a quiet connection (the last flush is older
// than the pace: no added latency), when the client's RDY window is full
// (nothing more can come; NSQ flushes then too), and it stops waiting when
// a full chunk of frames is queued (a stream, which the client should get
// without pause) or the window fills.
type flushPacer struct {
	// guarded by client.outMu
	queued  int  // frames in the outbox
	holding bool // the writer waits; Deliver may wake it
	wake    chan struct{}

	// used by the one writer goroutine there is at a time
	lastFlush time.Time
	timer     *time.Timer
}

// startHold prepares a wait; client.outMu is held.
func (p *flushPacer) startHold() {
	if p.wake == nil {
		p.wake = make(chan struct{}, 1)
	}
	select {
	case <-p.wake: // a stale wake-up from an earlier hold
	default:
	}
	p.holding = true
}

// wait returns after d, or sooner if Deliver wakes the writer.
func (p *flushPacer) wait(d time.Duration) {
	if p.timer == nil {
		p.timer = time.NewTimer(d)
	} else {
		p.timer.Reset(d)
	}
	select {
	case <-p.timer.C:
	case <-p.wake:
		p.timer.Stop()
	}
}

// wakeWriter ends a hold.
func (p *flushPacer) wakeWriter() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// holdFor is how long the writer should keep the buffered frames before
// flushing them (0: flush now). The pace is the client's
// output_buffer_timeout, at most maxFlushPace; a client that turned output
// buffering off is never held. c.writeMu is held.
func (c *client) holdFor() time.Duration {
	pace := min(c.outputBufTimeout, maxFlushPace)
	if pace <= 0 || c.writer.Buffered() == 0 || c.closed.Load() || c.windowFull() {
		return 0
	}
	return pace - time.Since(c.pace.lastFlush)
}

// windowFull reports whether the client can take no more messages now.
func (c *client) windowFull() bool {
	sub, _, _ := c.subscription()
	if sub == nil {
		return true
	}
	rdy, inFlight := sub.Counts()
	return inFlight >= rdy
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
	c.pace.lastFlush = time.Now()
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
