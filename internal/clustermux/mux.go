// Package clustermux shares a node's one cluster listener among the Raft
// groups it is a member of: each group's transport gets a Stream, a
// raft.StreamLayer of its own, and a connection names the group it is for
// when it opens.
//
// A connection for the default group carries no name, so on the wire it
// is exactly what a single hashicorp/raft transport speaks: nodes that run
// one group and nodes that run many can be members of that group together.
// A connection for another group opens with a header: the byte 'G', the
// name's length in one byte, and the name. The first byte of
// hashicorp/raft's own connections is an RPC type (0 to 4), so the two
// cannot be confused.
package clustermux

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// headerMagic opens a connection that names its group.
const headerMagic = 'G'

// MaxGroupName is the longest group name a header carries.
const MaxGroupName = 255

// headerTimeout bounds how long an accepted connection may take to say
// which group it is for (over TLS this includes the handshake), so that a
// peer that connects and says nothing holds nothing for long.
const headerTimeout = 10 * time.Second

// ErrClosed is returned by Accept and Dial once the Stream or its Mux is
// closed.
var ErrClosed = errors.New("cluster stream closed")

// Dialer opens a connection to a peer's cluster listener (over TLS when the
// cluster uses it).
type Dialer func(addr string, timeout time.Duration) (net.Conn, error)

// Mux accepts on one listener and hands each connection to the Stream of
// the group it names.
type Mux struct {
	ln           net.Listener
	advertise    net.Addr
	dial         Dialer
	defaultGroup string
	log          *slog.Logger

	mu      sync.Mutex
	streams map[string]*Stream
	closed  bool
	done    chan struct{}
	wg      sync.WaitGroup
}

// New serves ln until Close. advertise is the address peers reach it at;
// a connection that names no group belongs to defaultGroup.
func New(ln net.Listener, advertise net.Addr, dial Dialer, defaultGroup string, log *slog.Logger) *Mux {
	m := &Mux{ln: ln, advertise: advertise, dial: dial, defaultGroup: defaultGroup, log: log,
		streams: make(map[string]*Stream), done: make(chan struct{})}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.accept()
	}()
	return m
}

// Stream registers a group on the listener. A group has one Stream at a
// time; closing it frees the name.
func (m *Mux) Stream(group string) (*Stream, error) {
	if len(group) > MaxGroupName {
		return nil, fmt.Errorf("group name of %d bytes; at most %d", len(group), MaxGroupName)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if _, ok := m.streams[group]; ok {
		return nil, fmt.Errorf("group %q already has a stream", group)
	}
	s := &Stream{mux: m, group: group, conns: make(chan net.Conn), closed: make(chan struct{})}
	m.streams[group] = s
	return s, nil
}

// Close stops accepting and closes every Stream; connections already
// handed over belong to their transports.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	streams := make([]*Stream, 0, len(m.streams))
	for _, s := range m.streams {
		streams = append(streams, s)
	}
	close(m.done)
	m.mu.Unlock()
	for _, s := range streams {
		s.Close()
	}
	err := m.ln.Close()
	m.wg.Wait()
	return err
}

func (m *Mux) accept() {
	const maxDelay = time.Second
	var delay time.Duration
	for {
		conn, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			// A temporary failure (out of descriptors): back off, as
			// net/http does, rather than spin.
			delay = min(max(2*delay, 5*time.Millisecond), maxDelay)
			m.log.Warn("cluster listener: accept failed; retrying", "err", err, "in", delay)
			select {
			case <-m.done:
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.route(conn)
		}()
	}
}

// route reads which group conn is for and hands it to that group's
// Stream, or closes it.
func (m *Mux) route(conn net.Conn) {
	group, c, err := readHeader(conn, m.defaultGroup)
	if err != nil {
		m.log.Warn("cluster listener: dropping a connection", "remote", conn.RemoteAddr(), "err", err)
		conn.Close()
		return
	}
	m.mu.Lock()
	s := m.streams[group]
	m.mu.Unlock()
	if s == nil {
		// Not (or no longer, or not yet) a member of the group here: the
		// peer's Raft retries, as it does against a node that is down.
		conn.Close()
		return
	}
	select {
	case s.conns <- c:
	case <-s.closed:
		conn.Close()
	case <-m.done:
		conn.Close()
	}
}

// readHeader reads the group a new connection names, within
// headerTimeout; the connection it returns reads on from just after the
// header (for the default group, from its first byte).
func readHeader(conn net.Conn, defaultGroup string) (string, net.Conn, error) {
	if err := conn.SetReadDeadline(time.Now().Add(headerTimeout)); err != nil {
		return "", nil, err
	}
	r := bufio.NewReader(conn)
	first, err := r.Peek(1)
	if err != nil {
		return "", nil, fmt.Errorf("reading the group header: %w", err)
	}
	group := defaultGroup
	if first[0] == headerMagic {
		var head [2]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return "", nil, fmt.Errorf("reading the group header: %w", err)
		}
		name := make([]byte, head[1])
		if _, err := io.ReadFull(r, name); err != nil {
			return "", nil, fmt.Errorf("reading the group name: %w", err)
		}
		group = string(name)
	}
	if err := conn.SetReadDeadline(time.Time{}); err != nil {
		return "", nil, err
	}
	return group, &bufferedConn{Conn: conn, r: r}, nil
}

// bufferedConn reads what readHeader buffered beyond the header before
// reading the connection again.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) {
	if c.r.Buffered() > 0 {
		return c.r.Read(p)
	}
	return c.Conn.Read(p)
}

// Stream is one group's share of the listener: a raft.StreamLayer.
type Stream struct {
	mux    *Mux
	group  string
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

var _ raft.StreamLayer = (*Stream)(nil)

// Accept implements net.Listener: the next connection for this group.
func (s *Stream) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.closed:
		return nil, ErrClosed
	}
}

// Close implements net.Listener: the group no longer takes connections
// here, and its name is free for a new Stream.
func (s *Stream) Close() error {
	s.once.Do(func() {
		close(s.closed)
		s.mux.mu.Lock()
		if s.mux.streams[s.group] == s {
			delete(s.mux.streams, s.group)
		}
		s.mux.mu.Unlock()
	})
	return nil
}

// Addr implements net.Listener: the address peers dial.
func (s *Stream) Addr() net.Addr { return s.mux.advertise }

// Dial implements raft.StreamLayer: a connection to the same group on the
// peer at addr.
func (s *Stream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	select {
	case <-s.closed:
		return nil, ErrClosed
	default:
	}
	deadline := time.Now().Add(timeout)
	conn, err := s.mux.dial(string(addr), timeout)
	if err != nil {
		return nil, err
	}
	if s.group == s.mux.defaultGroup {
		return conn, nil
	}
	head := make([]byte, 0, 2+len(s.group))
	head = append(head, headerMagic, byte(len(s.group)))
	head = append(head, s.group...)
	if err := conn.SetWriteDeadline(deadline); err != nil {
		conn.Close()
		return nil, err
	}
	if _, err := conn.Write(head); err != nil {
		conn.Close()
		return nil, fmt.Errorf("naming group %q to %s: %w", s.group, addr, err)
	}
	if err := conn.SetWriteDeadline(time.Time{}); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}
