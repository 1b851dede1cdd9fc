package nsqd

import (
	"bufio"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nsqgo/nsq/internal/wire"
)

// Client states, as reported in /stats (PROTOCOL.md §D.4).
const (
	stateInit       = 0
	stateSubscribed = 3
	stateClosing    = 4
)

// Connection buffer sizes. The read buffer is NSQ's 16 KiB line limit;
// the write buffer defaults to 16 KiB and is whatever output_buffer_size the
// client asked for, never more: message bodies bypass it when they are
// larger (bufio writes them straight through), so it never grows to the
// largest message (DESIGN.md memory rule 1).
const (
	readBufferSize         = 16 * 1024
	defaultOutputBufferLen = 16 * 1024
)

// client is one TCP connection speaking protocol V2. One goroutine reads and
// executes commands; message frames are written by a short-lived writer
// goroutine that exists only while there is something to send, and
// heartbeats by a runtime timer, so an idle connection has one goroutine.
type client struct {
	id     int64
	n      *NSQD
	conn   net.Conn
	reader *bufio.Reader
	// paramBuf holds the parameters of a command with a body while the body
	// is read (see detachParams); only the reader goroutine uses it, as it
	// does lastPubTopic, oneBody and mpubWalk (see pubTopic, publishOne and
	// mpubArriving).
	paramBuf     [128]byte
	lastPubTopic string
	oneBody      [1][]byte
	mpubWalk     mpubWalk
	remoteAddr   string
	connectTS    time.Time

	// set by IDENTIFY before SUB, read-only afterwards
	clientID          string
	hostname          string
	userAgent         string
	heartbeatInterval time.Duration
	msgTimeout        time.Duration
	sampleRate        int32
	outputBufferSize  int
	outputBufTimeout  time.Duration
	identified        bool

	// ident is what stats reports of the fields above; IDENTIFY replaces it
	// whole, so a concurrent /stats never reads a half-written identity.
	ident atomic.Pointer[clientIdentity]

	state atomic.Int32

	// sub is set once by SUB (reader goroutine) and read by stats.
	subMu   sync.Mutex
	sub     *Subscription
	topic   *Topic
	channel *Channel

	messageCount atomic.Uint64
	pubMu        sync.Mutex
	pubCounts    map[string]uint64 // topic -> messages published

	// writeMu serialises every write to the connection.
	writeMu sync.Mutex
	writer  *bufio.Writer

	// outMu guards the outbox and writing.
	outMu   sync.Mutex
	outbox  []outMsg
	spare   []outMsg
	writing bool

	heartbeat    *time.Timer // guarded by writeMu
	heartbeatGen uint64      // guarded by writeMu; numbers the timers
	closeOnce    sync.Once
	closed       atomic.Bool

	tr    transport  // TLS and compression (negotiate.go)
	authz clientAuth // AUTH state (auth.go)
}

func newClient(id int64, n *NSQD, conn net.Conn) *client {
	host := conn.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	c := &client{
		id:                id,
		n:                 n,
		conn:              conn,
		reader:            bufio.NewReaderSize(conn, readBufferSize),
		writer:            bufio.NewWriterSize(conn, defaultOutputBufferLen),
		remoteAddr:        conn.RemoteAddr().String(),
		connectTS:         time.Now(),
		clientID:          host,
		hostname:          host,
		heartbeatInterval: n.opts.ClientTimeout / 2,
		msgTimeout:        n.opts.MsgTimeout,
		outputBufferSize:  defaultOutputBufferLen,
		outputBufTimeout:  n.opts.OutputBufferTimeout,
	}
	c.publishIdentity()
	return c
}

// ID implements Consumer.
func (c *client) ID() int64 { return c.id }

// outMsg is a message frame waiting to be written: its header encoded at
// delivery, under the channel lock, because the Message's delivery state
// (attempts) changes when it is redelivered — possibly while this copy
// still waits here — and the body, immutable and shared.
type outMsg struct {
	hdr  [messageHeaderLen]byte
	body []byte
}

// Deliver implements Consumer: queue m and make sure a writer runs.
func (c *client) Deliver(m *Message) {
	c.messageCount.Add(1)
	om := outMsg{body: m.Body}
	m.encodeHeader(&om.hdr)
	c.outMu.Lock()
	c.outbox = append(c.outbox, om)
	start := !c.writing
	c.writing = true
	c.outMu.Unlock()
	if start {
		go c.writeOutbox()
	}
}

// writeOutbox sends queued messages and flushes once the outbox is empty,
// so a burst goes out in as few syscalls as the buffer allows.
func (c *client) writeOutbox() {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	for {
		c.outMu.Lock()
		batch := c.outbox
		if len(batch) == 0 {
			c.writing = false
			c.outbox = c.spare[:0]
			c.spare = nil
			c.outMu.Unlock()
			c.flushLocked()
			return
		}
		// Hand the spare array to the outbox and forget it, so the batch
		// being written and the outbox never share an array.
		c.outbox = c.spare[:0]
		c.spare = nil
		c.outMu.Unlock()

		// One deadline covers the batch: arming it per message costs a
		// clock read and a runtime timer update each.
		c.setWriteDeadline()
		for i := range batch {
			if !c.closed.Load() {
				c.writeMessageLocked(&batch[i])
			}
			batch[i] = outMsg{}
		}
		c.outMu.Lock()
		if cap(batch) <= 1024 {
			c.spare = batch[:0]
		}
		c.outMu.Unlock()
	}
}

// writeMessageLocked writes one message frame: a fixed 34-byte header and
// the shared body, never copying the body into a buffer of its own.
func (c *client) writeMessageLocked(m *outMsg) {
	var hdr [8 + messageHeaderLen]byte
	size := uint32(4 + messageHeaderLen + len(m.body))
	hdr[0], hdr[1], hdr[2], hdr[3] = byte(size>>24), byte(size>>16), byte(size>>8), byte(size)
	hdr[7] = byte(wire.FrameTypeMessage)
	copy(hdr[8:], m.hdr[:])
	if _, err := c.writer.Write(hdr[:]); err != nil {
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
	c.setWriteDeadline()
	if err := wire.WriteFrame(c.writer, frameType, data); err != nil {
		return err
	}
	return c.flushLocked()
}

func (c *client) flushLocked() error {
	if c.writer.Buffered() == 0 && (c.tr.comp == nil || !c.tr.comp.pending()) {
		return nil
	}
	c.setWriteDeadline()
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

func (c *client) setWriteDeadline() {
	if c.heartbeatInterval > 0 {
		_ = c.conn.SetWriteDeadline(time.Now().Add(c.heartbeatInterval))
	}
}

// fail closes the connection after a write error; the reader then sees the
// close and cleans up.
func (c *client) fail(err error) {
	if !c.closed.Load() {
		c.n.log.Debug("client write failed", "client", c.remoteAddr, "err", err)
	}
	c.close()
}

// Close implements Consumer: the channel is going away.
func (c *client) Close() { c.close() }

// close shuts the connection; idempotent and safe from any goroutine.
func (c *client) close() {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		_ = c.conn.Close()
	})
}

// startHeartbeats arms the heartbeat timer (not reset by traffic, as NSQ).
func (c *client) startHeartbeats() {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.startHeartbeatsLocked()
}

// setHeartbeatInterval applies an IDENTIFY heartbeat_interval: the old
// timer stops (a callback of it already running finds itself replaced and
// does nothing), and with heartbeats disabled no write deadline is left
// over from before.
func (c *client) setHeartbeatInterval(d time.Duration) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.heartbeatInterval = d
	if c.heartbeat != nil {
		c.heartbeat.Stop()
		c.heartbeat = nil
	}
	if d <= 0 {
		_ = c.conn.SetWriteDeadline(time.Time{})
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
	c.setWriteDeadline()
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

// clientIdentity is the IDENTIFY-provided part of a client's stats.
type clientIdentity struct {
	clientID, hostname, userAgent string
	sampleRate                    int32
}

// publishIdentity makes the current identity visible to stats.
func (c *client) publishIdentity() {
	c.ident.Store(&clientIdentity{c.clientID, c.hostname, c.userAgent, c.sampleRate})
}

func (c *client) recordPub(topic string, n int) {
	c.pubMu.Lock()
	if c.pubCounts == nil {
		c.pubCounts = make(map[string]uint64)
		c.n.addProducer(c)
	}
	c.pubCounts[topic] += uint64(n)
	c.pubMu.Unlock()
}

func (c *client) subscription() (*Subscription, *Topic, *Channel) {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	return c.sub, c.topic, c.channel
}
