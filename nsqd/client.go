package nsqd

import (
	"bufio"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Client states, as reported in /stats (docs/protocol.md#v2-states).
const (
	stateInit       = 0
	stateSubscribed = 3
	stateClosing    = 4
)

// client is one TCP connection speaking protocol V2. One goroutine reads and
// executes commands; message frames are written by a short-lived writer
// goroutine that exists only while there is something to send, and
// heartbeats by a runtime timer, so an idle connection has one goroutine.
type client struct {
	id     int64
	d      clientDaemon
	lim    *clientLimits // d's, kept at hand
	conn   net.Conn
	reader *bufio.Reader
	// paramBuf holds the parameters of a command with a body while the body
	// is read (see detachParams); only the reader goroutine uses it, as it
	// does lastPubTopic, oneBody, mpubWalk and mpubBufs (see pubTopic,
	// publishOne, mpubArriving and readSizedBody).
	paramBuf     [paramScratchLen]byte
	lastPubTopic string
	oneBody      [1][]byte
	mpubWalk     mpubWalk
	mpubBufs     *pubBuffers // the buffers of the MPUB being read
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
	topology          topology // IDENTIFY topology_region/topology_zone

	// ident is what stats reports of the fields above; IDENTIFY replaces it
	// whole, so a concurrent /stats never reads a half-written identity.
	ident atomic.Pointer[clientIdentity]

	state atomic.Int32

	// subscribed is set once by SUB (reader goroutine) and read by stats.
	subscribed atomic.Pointer[clientSubscription]

	messageCount atomic.Uint64
	pubMu        sync.Mutex
	pubCounts    map[string]uint64 // topic -> messages published

	// writeMu serialises every write to the connection.
	writeMu sync.Mutex
	writer  *bufio.Writer
	// sock is conn as the write side sees it: each write syscall gets its
	// own deadline (client_write.go).
	sock *stallConn

	// outMu guards the outbox (outHead to outTail) and writing.
	outMu   sync.Mutex
	outHead *outChunk
	outTail *outChunk
	writing bool // a writer runs, or Deliver has asked for Send

	heartbeat    *time.Timer // guarded by writeMu
	heartbeatGen uint64      // guarded by writeMu; numbers the timers
	closeOnce    sync.Once
	closed       atomic.Bool

	tr    transport  // TLS and compression (client_negotiate.go)
	authz clientAuth // AUTH state (client_auth.go)
}

func newClient(id int64, d clientDaemon, conn net.Conn) *client {
	host := conn.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	lim := d.clientLimits()
	sock := newStallConn(conn, lim.ClientTimeout/2)
	c := &client{
		id:                id,
		d:                 d,
		lim:               lim,
		conn:              conn,
		sock:              sock,
		reader:            bufio.NewReaderSize(conn, readBufferSize),
		writer:            bufio.NewWriterSize(sock, defaultOutputBufferLen),
		remoteAddr:        conn.RemoteAddr().String(),
		connectTS:         time.Now(),
		clientID:          host,
		hostname:          host,
		heartbeatInterval: lim.ClientTimeout / 2,
		msgTimeout:        lim.MsgTimeout,
		outputBufferSize:  defaultOutputBufferLen,
		outputBufTimeout:  lim.OutputBufferTimeout,
	}
	c.publishIdentity()
	return c
}

// ID implements Consumer.
func (c *client) ID() int64 { return c.id }

// fail closes the connection after a write error; the reader then sees the
// close and cleans up. NSQ's message pump logs its write errors so.
func (c *client) fail(err error) {
	if !c.closed.Load() {
		c.logf(slog.LevelError, "PROTOCOL(V2): [%s] messagePump error - %s", c.remoteAddr, err)
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

// clientIdentity is the IDENTIFY-provided part of a client's stats.
type clientIdentity struct {
	clientID, hostname, userAgent string
	sampleRate                    int32
	topology                      topology
}

// publishIdentity makes the current identity visible to stats.
func (c *client) publishIdentity() {
	c.ident.Store(&clientIdentity{c.clientID, c.hostname, c.userAgent, c.sampleRate, c.topology})
}

func (c *client) recordPub(topic string, n int) {
	c.pubMu.Lock()
	if c.pubCounts == nil {
		c.pubCounts = make(map[string]uint64)
	}
	c.pubCounts[topic] += uint64(n)
	c.pubMu.Unlock()
}

// clientSubscription is what SUB made of a connection.
type clientSubscription struct {
	sub     *Subscription
	topic   *Topic
	channel *Channel
}

func (c *client) subscription() (*Subscription, *Topic, *Channel) {
	if s := c.subscribed.Load(); s != nil {
		return s.sub, s.topic, s.channel
	}
	return nil, nil, nil
}
