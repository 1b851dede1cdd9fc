package nsqd

import (
	"bytes"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/nsqgo/nsq/internal/wire"
)

// IDENTIFY feature negotiation (docs/protocol.md#negotiation): after the
// JSON reply the connection's byte stream is upgraded to TLS, then to
// snappy or deflate, with an "OK" frame sent over each new layer.
// Layering, from the socket up:
//
//	net.Conn → tls.Conn → compressor / decompressor → bufio writer / reader
//
// c.conn stays the socket (read deadlines and Close apply to it; writes go
// through c.sock, which arms a write deadline per syscall); c.reader and
// c.writer keep their buffers and are re-pointed at the new top layer.

// Compression a connection negotiated, as /stats reports it.
const (
	compressNone int32 = iota
	compressSnappy
	compressDeflate
)

// tlsHandshakeTimeout is how long a client has for the TLS handshake.
const tlsHandshakeTimeout = 5 * time.Second

// compressor sits between a client's bufio.Writer and the connection.
type compressor interface {
	io.Writer
	// Flush makes everything written so far readable by the client.
	Flush() error
	// pending reports written data that Flush has not pushed out yet.
	pending() bool
	// idle is called once per heartbeat interval while flushed.
	idle()
	// release frees pooled state when the connection ends.
	release()
}

func (w *snappyWriter) Flush() error  { return nil }
func (w *snappyWriter) pending() bool { return false }
func (w *snappyWriter) idle()         {}
func (w *snappyWriter) release()      {}

// transport is what negotiation changed on a connection.
type transport struct {
	// set once by the reader goroutine with writeMu held; read by stats
	tlsState    atomic.Pointer[tls.ConnectionState]
	compression atomic.Int32

	// guarded by client.writeMu
	tlsConn *tls.Conn
	comp    compressor
}

// features is what IDENTIFY agreed to turn on.
type features struct {
	tls, snappy, deflate bool
	deflateLevel         int
}

func (f features) any() bool { return f.tls || f.snappy || f.deflate }

// negotiate sends the IDENTIFY reply and performs the upgrades. writeMu is
// held throughout so that no heartbeat slips in between the plain-text
// reply and the handshake.
func (c *client) negotiate(reply []byte, f features) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if err := c.sendLocked(wire.FrameTypeResponse, reply); err != nil {
		return identifyFailed(err)
	}
	if f.tls {
		c.logf(slog.LevelInfo, "PROTOCOL(V2): [%s] upgrading connection to TLS", c.remoteAddr)
		if err := c.upgradeTLSLocked(); err != nil {
			return identifyFailed(err)
		}
		if err := c.sendLocked(wire.FrameTypeResponse, wire.OK); err != nil {
			return identifyFailed(err)
		}
	}
	if f.snappy {
		c.logf(slog.LevelInfo, "PROTOCOL(V2): [%s] upgrading connection to snappy", c.remoteAddr)
		c.upgradeCompressionLocked(compressSnappy, &snappyReader{src: c.upgradeSource()}, &snappyWriter{dst: c.baseStream()})
		if err := c.sendLocked(wire.FrameTypeResponse, wire.OK); err != nil {
			return identifyFailed(err)
		}
	}
	if f.deflate {
		c.logf(slog.LevelInfo, "PROTOCOL(V2): [%s] upgrading connection to deflate (level %d)", c.remoteAddr, f.deflateLevel)
		c.upgradeCompressionLocked(compressDeflate, newDeflateReader(c.upgradeSource()), &deflateWriter{dst: c.baseStream(), level: f.deflateLevel})
		if err := c.sendLocked(wire.FrameTypeResponse, wire.OK); err != nil {
			return identifyFailed(err)
		}
	}
	return nil
}

func identifyFailed(err error) error {
	return wire.NewFatalClientErr("E_IDENTIFY_FAILED", "IDENTIFY failed %s", err).WithParent(err)
}

// upgradeTLSLocked runs the server handshake on the socket.
func (c *client) upgradeTLSLocked() error {
	var conn net.Conn = c.sock
	if pre := c.unreadBytes(); len(pre) > 0 {
		conn = &prefixConn{Conn: c.sock, pre: pre}
	}
	tc := tls.Server(conn, c.d.serverTLS())
	_ = c.conn.SetDeadline(time.Now().Add(tlsHandshakeTimeout))
	err := tc.Handshake()
	_ = c.conn.SetDeadline(time.Time{})
	if err != nil {
		return err
	}
	c.tr.tlsConn = tc
	c.reader.Reset(tc)
	c.writer.Reset(tc)
	st := tc.ConnectionState()
	c.tr.tlsState.Store(&st)
	return nil
}

// upgradeCompressionLocked puts a decompressor under c.reader and a
// compressor under c.writer.
func (c *client) upgradeCompressionLocked(kind int32, r io.Reader, w compressor) {
	c.reader.Reset(r)
	c.tr.comp = w
	c.writer.Reset(w)
	c.tr.compression.Store(kind)
}

// baseStream is the layer a compressor writes to: TLS if negotiated, else
// the socket (with its per-syscall write deadline). writeMu is held.
func (c *client) baseStream() io.ReadWriter {
	if c.tr.tlsConn != nil {
		return c.tr.tlsConn
	}
	return c.sock
}

// upgradeSource is what a decompressor reads from: the base stream, after
// any bytes the client sent early that c.reader already holds.
func (c *client) upgradeSource() io.Reader {
	if pre := c.unreadBytes(); len(pre) > 0 {
		return io.MultiReader(bytes.NewReader(pre), c.baseStream())
	}
	return c.baseStream()
}

// unreadBytes copies what c.reader buffered beyond the IDENTIFY body; a
// well-behaved client sends nothing before it has read the reply.
func (c *client) unreadBytes() []byte {
	n := c.reader.Buffered()
	if n == 0 {
		return nil
	}
	b, _ := c.reader.Peek(n)
	return bytes.Clone(b)
}

// streamWriter is what c.writer writes to. writeMu is held.
func (c *client) streamWriter() io.Writer {
	if c.tr.comp != nil {
		return c.tr.comp
	}
	return c.baseStream()
}

// flushCompressorLocked pushes out what the compressor holds.
func (c *client) flushCompressorLocked() error {
	if c.tr.comp == nil || !c.tr.comp.pending() {
		return nil
	}
	return c.tr.comp.Flush()
}

// idleTickLocked lets an idle compressor give its state back; it runs on
// each heartbeat with writeMu held and the writer flushed.
func (c *client) idleTickLocked() {
	if c.tr.comp != nil && c.writer.Buffered() == 0 {
		c.tr.comp.idle()
	}
}

// releaseTransportLocked frees pooled compressor state at the end.
func (c *client) releaseTransportLocked() {
	if c.tr.comp != nil {
		c.tr.comp.release()
	}
}

// prefixConn is a net.Conn whose first reads return pre.
type prefixConn struct {
	net.Conn
	pre []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.pre) > 0 {
		n := copy(b, p.pre)
		p.pre = p.pre[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// offeredFeatures is what the server agrees to of what the client asked:
// what the options allow and the connection does not have yet (a second
// IDENTIFY cannot stack another TLS or compression layer).
func (c *client) offeredFeatures(req *identifyRequest, deflateLevel int) features {
	o := c.lim
	return features{
		tls:          req.TLSv1 && c.d.serverTLS() != nil && c.tr.tlsConn == nil,
		snappy:       req.Snappy && o.SnappyEnabled && c.tr.comp == nil,
		deflate:      req.Deflate && o.DeflateEnabled && c.tr.comp == nil,
		deflateLevel: deflateLevel,
	}
}

// tlsRequiredErr refuses a TCP command before the TLS upgrade when TLS is
// required (IDENTIFY, which negotiates it, is always allowed).
func (c *client) tlsRequiredErr(cmd []byte) error {
	if c.lim.TLSRequired == TLSNotRequired || c.tr.tlsState.Load() != nil || string(cmd) == "IDENTIFY" {
		return nil
	}
	return wire.NewFatalClientErr("E_INVALID", "cannot %s in current state (TLS required)", cmd)
}
