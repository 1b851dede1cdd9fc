package lookupd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/internal/names"
	"github.com/nsqgo/nsq/internal/wire"
)

// protocolV1 runs the nsqd → nsqlookupd registration protocol
// (docs/protocol.md#v1). Every error is fatal: the reply is sent, then the
// connection closed.
type protocolV1 struct {
	db            *RegistrationDB
	logger        *slog.Logger
	identifyReply []byte        // precomputed: the ports are known after bind
	idleTimeout   time.Duration // wait for the next command line
}

// clientV1 is one nsqd connection. It is owned by its goroutine; nothing
// else touches it, so it has no lock.
type clientV1 struct {
	conn net.Conn
	id   string // producer identity (remote address)
	r    *bufio.Reader
	w    *bufio.Writer
	peer *Peer // nil until IDENTIFY
}

// v1Command handles one command line; params excludes the command name.
type v1Command func(p *protocolV1, c *clientV1, params []string) ([]byte, error)

// v1Commands is the whole protocol. A table, so that there is one place to
// read what the daemon accepts.
var v1Commands = map[string]v1Command{
	"PING":       (*protocolV1).ping,
	"IDENTIFY":   (*protocolV1).identify,
	"REGISTER":   (*protocolV1).register,
	"UNREGISTER": (*protocolV1).unregister,
}

// handle runs one connection from its magic to its close, logging its
// life as NSQ does.
func (s *tcpServer) handle(conn net.Conn) {
	defer conn.Close()
	addr := conn.RemoteAddr()
	s.logf(slog.LevelInfo, "TCP: new client(%s)", addr)
	var magic [len(wire.MagicV1)]byte
	_ = conn.SetReadDeadline(time.Now().Add(handshakeTimeout))
	if _, err := io.ReadFull(conn, magic[:]); err != nil {
		s.logf(slog.LevelError, "failed to read protocol version - %s", err)
		return
	}
	s.logf(slog.LevelInfo, "CLIENT(%s): desired protocol magic '%s'", addr, magic[:])
	if string(magic[:]) != wire.MagicV1 {
		_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		_ = wire.WriteV1Response(conn, []byte("E_BAD_PROTOCOL"))
		s.logf(slog.LevelError, "client(%s) bad protocol magic '%s'", addr, magic[:])
		lingeringClose(conn)
		return
	}
	c := &clientV1{
		conn: conn,
		id:   s.peerID(conn),
		r:    bufio.NewReaderSize(conn, maxLineLength),
		w:    bufio.NewWriterSize(conn, writeBufferSize),
	}
	err := s.proto.ioLoop(c)
	if err != nil {
		s.logf(slog.LevelError, "client(%s) - %s", addr, err)
	}
	if isClientErr(err) { // an error reply was sent: let the client read it
		lingeringClose(conn)
	}
}

// ioLoop reads commands until an error, then removes the peer's
// registrations: a dropped nsqd produces nothing. It returns why the
// connection ended, as NSQ's IOLoop does: the client error sent, or the
// read (io.EOF when the peer closed) or write that failed.
func (p *protocolV1) ioLoop(c *clientV1) error {
	err := p.readLoop(c)
	p.logf(slog.LevelInfo, "PROTOCOL(V1): [%s] exiting ioloop", c.id)
	if c.peer != nil {
		for _, r := range p.db.RemovePeer(c.peer) {
			p.logf(slog.LevelInfo, "DB: client(%s) UNREGISTER category:%s key:%s subkey:%s", c.id, r.Category, r.Key, r.SubKey)
		}
	}
	return err
}

func (p *protocolV1) readLoop(c *clientV1) error {
	for {
		_ = c.conn.SetReadDeadline(time.Now().Add(p.idleTimeout))
		line, err := c.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			err = wire.NewFatalClientErr("E_INVALID", "command line longer than %d bytes", maxLineLength)
			return p.sendError(c, err)
		}
		if err != nil {
			return err
		}
		params := strings.Split(strings.TrimSpace(string(line)), " ")
		resp, err := p.exec(c, params)
		if err != nil {
			return p.sendError(c, err) // every error is fatal
		}
		if err := c.send(resp); err != nil {
			return err
		}
	}
}

// sendError sends err to the client, logging it first as NSQ logs every
// error it sends a client, and returns it.
func (p *protocolV1) sendError(c *clientV1, err error) error {
	parent := wire.ParentContext(err)
	p.logf(slog.LevelError, "[%s] - %s%s", c.id, err, parent)
	if sendErr := c.send([]byte(err.Error())); sendErr != nil {
		p.logf(slog.LevelError, "[%s] - %s%s", c.id, sendErr, parent)
	}
	return err
}

func isClientErr(err error) bool {
	var fatal *wire.FatalClientErr
	return errors.As(err, &fatal)
}

// logf logs as NSQ's nsqlookupd does: the values in the message.
func (p *protocolV1) logf(level slog.Level, format string, args ...any) {
	logging.Logf(p.logger, level, format, args...)
}

// lingeringClose half-closes conn and discards what the peer still sends
// for a moment. Closing a socket with unread input makes the kernel send a
// RST, which can destroy the error reply before the peer reads it.
func lingeringClose(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	_ = conn.SetReadDeadline(time.Now().Add(lingerTimeout))
	_, _ = io.CopyN(io.Discard, conn, lingerMaxBytes)
	_ = conn.Close()
}

func (p *protocolV1) exec(c *clientV1, params []string) ([]byte, error) {
	cmd, ok := v1Commands[params[0]]
	if !ok {
		return nil, wire.NewFatalClientErr("E_INVALID", "invalid command %s", params[0])
	}
	return cmd(p, c, params[1:])
}

// send writes one [size][data] reply as a single write.
func (c *clientV1) send(data []byte) error {
	_ = c.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := wire.WriteV1Response(c.w, data); err != nil {
		return err
	}
	return c.w.Flush()
}

var okReply = []byte("OK")

func (p *protocolV1) ping(c *clientV1, _ []string) ([]byte, error) {
	// A PING may come before IDENTIFY; then there is nobody to refresh.
	if c.peer != nil {
		now := time.Now()
		p.logf(slog.LevelInfo, "CLIENT(%s): pinged (last ping %s)", c.id, now.Sub(c.peer.LastUpdate()))
		c.peer.Touch(now)
	}
	return okReply, nil
}

func (p *protocolV1) identify(c *clientV1, _ []string) ([]byte, error) {
	if c.peer != nil {
		return nil, wire.NewFatalClientErr("E_INVALID", "cannot IDENTIFY again")
	}
	_ = c.conn.SetReadDeadline(time.Now().Add(bodyTimeout))
	size, err := wire.ReadSize(c.r)
	if err != nil {
		return nil, wire.NewFatalClientErr("E_BAD_BODY", "IDENTIFY failed to read body size").WithParent(err)
	}
	if size < 0 || size > maxIdentifyBody {
		return nil, wire.NewFatalClientErr("E_BAD_BODY", "IDENTIFY invalid body size %d", size)
	}
	// Grow with what arrives, not with what was announced, so a peer that
	// announces 1 MiB and sends nothing costs nothing.
	var body bytes.Buffer
	if _, err := io.CopyN(&body, c.r, int64(size)); err != nil {
		return nil, wire.NewFatalClientErr("E_BAD_BODY", "IDENTIFY failed to read body").WithParent(err)
	}
	var info PeerInfo
	if err := json.Unmarshal(body.Bytes(), &info); err != nil {
		return nil, wire.NewFatalClientErr("E_BAD_BODY", "IDENTIFY failed to decode JSON body").WithParent(err)
	}
	info.RemoteAddress = c.conn.RemoteAddr().String()
	if info.BroadcastAddress == "" || info.TCPPort == 0 || info.HTTPPort == 0 || info.Version == "" {
		return nil, wire.NewFatalClientErr("E_BAD_BODY", "IDENTIFY missing fields")
	}
	c.peer = NewPeer(c.id, info, time.Now())
	p.logf(slog.LevelInfo, "CLIENT(%s): IDENTIFY Address:%s TCP:%d HTTP:%d Version:%s",
		c.id, info.BroadcastAddress, info.TCPPort, info.HTTPPort, info.Version)
	p.add(c, Registration{CategoryClient, "", ""})
	return p.identifyReply, nil
}

func (p *protocolV1) register(c *clientV1, params []string) ([]byte, error) {
	if c.peer == nil {
		return nil, wire.NewFatalClientErr("E_INVALID", "client must IDENTIFY")
	}
	topic, channel, err := topicChannel("REGISTER", params)
	if err != nil {
		return nil, err
	}
	if channel != "" {
		p.add(c, Registration{CategoryChannel, topic, channel})
	}
	p.add(c, Registration{CategoryTopic, topic, ""})
	return okReply, nil
}

func (p *protocolV1) add(c *clientV1, r Registration) {
	if p.db.AddProducer(r, c.peer) {
		p.logf(slog.LevelInfo, "DB: client(%s) REGISTER category:%s key:%s subkey:%s", c.id, r.Category, r.Key, r.SubKey)
	}
}

func (p *protocolV1) unregister(c *clientV1, params []string) ([]byte, error) {
	if c.peer == nil {
		return nil, wire.NewFatalClientErr("E_INVALID", "client must IDENTIFY")
	}
	topic, channel, err := topicChannel("UNREGISTER", params)
	if err != nil {
		return nil, err
	}
	if channel != "" {
		p.remove(c, Registration{CategoryChannel, topic, channel})
		return okReply, nil
	}
	// A topic unregistration also drops this peer's channels of the topic.
	// nsqd unregisters channels first, so finding any is unusual.
	for _, r := range p.db.FindRegistrations(CategoryChannel, topic, Wildcard) {
		if removed, _ := p.db.RemoveProducer(r, c.id); removed {
			p.logf(slog.LevelWarn, "client(%s) unexpected UNREGISTER category:%s key:%s subkey:%s", c.id, r.Category, r.Key, r.SubKey)
		}
	}
	p.remove(c, Registration{CategoryTopic, topic, ""})
	return okReply, nil
}

// remove drops the peer from r, and r itself when it is ephemeral and has
// no producer left.
func (p *protocolV1) remove(c *clientV1, r Registration) {
	removed, left := p.db.RemoveProducer(r, c.id)
	if removed {
		p.logf(slog.LevelInfo, "DB: client(%s) UNREGISTER category:%s key:%s subkey:%s", c.id, r.Category, r.Key, r.SubKey)
	}
	name := r.Key
	if r.Category == CategoryChannel {
		name = r.SubKey
	}
	if left == 0 && names.IsEphemeral(name) {
		p.db.RemoveRegistrationIfEmpty(r)
	}
}

// topicChannel validates "<topic> [<channel>]".
func topicChannel(cmd string, params []string) (topic, channel string, err error) {
	if len(params) == 0 {
		return "", "", wire.NewFatalClientErr("E_INVALID", "%s insufficient number of params", cmd)
	}
	topic = params[0]
	if len(params) >= 2 {
		channel = params[1]
	}
	if !names.Valid(topic) {
		return "", "", wire.NewFatalClientErr("E_BAD_TOPIC", "%s topic name '%s' is not valid", cmd, topic)
	}
	if channel != "" && !names.Valid(channel) {
		return "", "", wire.NewFatalClientErr("E_BAD_CHANNEL", "%s channel name '%s' is not valid", cmd, channel)
	}
	return topic, channel, nil
}
