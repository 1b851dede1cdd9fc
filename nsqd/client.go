package nsqd

import (
	"bufio"
	"net"
	"strings"
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
	id         int64
	n          *NSQD
	conn       net.Conn
	reader     *bufio.Reader
	remoteAddr string
	connectTS  time.Time

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
	outbox  []*Message
	spare   []*Message
	writing bool

	heartbeat *time.Timer
	closeOnce sync.Once
	closed    atomic.Bool
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
	return c
}

// ID implements Consumer.
func (c *client) ID() int64 { return c.id }

// Deliver implements Consumer: queue m and make sure a writer runs.
func (c *client) Deliver(m *Message) {
	c.messageCount.Add(1)
	c.outMu.Lock()
	c.outbox = append(c.outbox, m)
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

		for i, m := range batch {
			if !c.closed.Load() {
				c.writeMessageLocked(m)
			}
			batch[i] = nil
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
func (c *client) writeMessageLocked(m *Message) {
	var hdr [8 + messageHeaderLen]byte
	size := uint32(4 + messageHeaderLen + len(m.Body))
	hdr[0], hdr[1], hdr[2], hdr[3] = byte(size>>24), byte(size>>16), byte(size>>8), byte(size)
	hdr[7] = byte(wire.FrameTypeMessage)
	var mh [messageHeaderLen]byte
	m.encodeHeader(&mh)
	copy(hdr[8:], mh[:])
	c.setWriteDeadline()
	if _, err := c.writer.Write(hdr[:]); err != nil {
		c.fail(err)
		return
	}
	if _, err := c.writer.Write(m.Body); err != nil {
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
	if c.writer.Buffered() == 0 {
		return nil
	}
	c.setWriteDeadline()
	if err := c.writer.Flush(); err != nil {
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

// close shuts the connection; idempotent and safe from any goroutine.
func (c *client) close() {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		_ = c.conn.Close()
	})
}

// startHeartbeats arms the heartbeat timer (not reset by traffic, as NSQ).
func (c *client) startHeartbeats() {
	if c.heartbeatInterval <= 0 {
		return
	}
	c.heartbeat = time.AfterFunc(c.heartbeatInterval, c.onHeartbeat)
}

func (c *client) onHeartbeat() {
	if c.closed.Load() {
		return
	}
	if err := c.sendFrame(wire.FrameTypeResponse, wire.Heartbeat); err != nil {
		c.fail(err)
		return
	}
	c.heartbeat.Reset(c.heartbeatInterval)
}

// setOutputBuffer replaces the write buffer after IDENTIFY. Only called
// before any message can be queued.
func (c *client) setOutputBuffer(size int) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.outputBufferSize = size
	c.writer = bufio.NewWriterSize(c.conn, size)
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

func isTemporaryClose(err error) bool {
	return err != nil && strings.Contains(err.Error(), "use of closed network connection")
}
