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

// handle runs one connection from its magic to its close.
func (s *tcpServer) handle(conn net.Conn) {
	defer conn.Close()
	log := s.logger.With("client", conn.RemoteAddr().String())
	var magic [len(wire.MagicV1)]byte
	_ = conn.SetReadDeadline(time.Now().Add(handshakeTimeout))
	if _, err := io.ReadFull(conn, magic[:]); err != nil {
		log.Debug("TCP: failed to read protocol magic", "err", err)
		return
	}
	if string(magic[:]) != wire.MagicV1 {
		log.Error("TCP: bad protocol magic", "magic", string(magic[:]))
		_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		_ = wire.WriteV1Response(conn, []byte("E_BAD_PROTOCOL"))
		lingeringClose(conn)
		return
	}
	c := &clientV1{
		conn: conn,
		id:   s.peerID(conn),
		r:    bufio.NewReaderSize(conn, maxLineLength),
		w:    bufio.NewWriterSize(conn, writeBufferSize),
	}
	s.proto.ioLoop(c, log)
}

// ioLoop reads commands until an error, then removes the peer's
// registrations: a dropped nsqd produces nothing.
func (p *protocolV1) ioLoop(c *clientV1, log *slog.Logger) {
	linger := false // after a fatal error reply
	for {
		_ = c.conn.SetReadDeadline(time.Now().Add(p.idleTimeout))
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				ferr := wire.NewFatalClientErr("E_INVALID", "command line longer than %d bytes", maxLineLength)
				log.Error("PROTOCOL(V1): " + ferr.Error())
				_ = c.send([]byte(ferr.Error()))
				linger = true
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				log.Info("PROTOCOL(V1): read failed", "err", err)
			}
			break
		}
		params := strings.Split(strings.TrimSpace(string(line)), " ")
		resp, err := p.exec(c, params)
		if err != nil {
			if cause := errors.Unwrap(err); cause != nil {
				log.Error("PROTOCOL(V1): "+err.Error(), "cause", cause)
			} else {
				log.Error("PROTOCOL(V1): " + err.Error())
			}
			_ = c.send([]byte(err.Error()))
			linger = true
			break
		}
		if err := c.send(resp); err != nil {
			log.Info("PROTOCOL(V1): write failed", "err", err)
			break
		}
	}
	log.Info("PROTOCOL(V1): exiting ioloop")
	if c.peer != nil {
		for _, r := range p.db.RemovePeer(c.peer) {
			log.Info("DB: UNREGISTER", "category", r.Category, "key", r.Key, "subkey", r.SubKey)
		}
	}
	if linger {
		lingeringClose(c.conn)
	}
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
		c.peer.Touch(time.Now())
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
		return nil, fatalCause(err, "E_BAD_BODY", "IDENTIFY failed to read body size")
	}
	if size < 0 || size > maxIdentifyBody {
		return nil, wire.NewFatalClientErr("E_BAD_BODY", "IDENTIFY invalid body size %d", size)
	}
	// Grow with what arrives, not with what was announced, so a peer that
	// announces 1 MiB and sends nothing costs nothing.
	var body bytes.Buffer
	if _, err := io.CopyN(&body, c.r, int64(size)); err != nil {
		return nil, fatalCause(err, "E_BAD_BODY", "IDENTIFY failed to read body")
	}
	var info PeerInfo
	if err := json.Unmarshal(body.Bytes(), &info); err != nil {
		return nil, fatalCause(err, "E_BAD_BODY", "IDENTIFY failed to decode JSON body")
	}
	info.RemoteAddress = c.conn.RemoteAddr().String()
	if info.BroadcastAddress == "" || info.TCPPort == 0 || info.HTTPPort == 0 || info.Version == "" {
		return nil, wire.NewFatalClientErr("E_BAD_BODY", "IDENTIFY missing fields")
	}
	c.peer = NewPeer(c.id, info, time.Now())
	p.logger.Info("CLIENT: IDENTIFY", "client", c.id, "address", info.BroadcastAddress,
		"tcp_port", info.TCPPort, "http_port", info.HTTPPort, "version", info.Version)
	if p.db.AddProducer(Registration{CategoryClient, "", ""}, c.peer) {
		p.logger.Info("DB: REGISTER", "client", c.id, "category", CategoryClient, "key", "", "subkey", "")
	}
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
		p.logger.Info("DB: REGISTER", "client", c.id, "category", r.Category, "key", r.Key, "subkey", r.SubKey)
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
			p.logger.Warn("client unexpected UNREGISTER", "client", c.id,
				"category", r.Category, "key", r.Key, "subkey", r.SubKey)
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
		p.logger.Info("DB: UNREGISTER", "client", c.id, "category", r.Category, "key", r.Key, "subkey", r.SubKey)
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

// causeErr is a fatal client error that remembers what caused it, for the
// log; the wire text is only the code and description.
type causeErr struct {
	*wire.FatalClientErr
	cause error
}

func (e causeErr) Unwrap() error { return e.cause }

func fatalCause(cause error, code, desc string) error {
	return causeErr{&wire.FatalClientErr{Code: code, Desc: desc}, cause}
}
