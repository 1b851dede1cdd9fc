package lookupd

import (
	"errors"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nsqgo/nsq/internal/logging"
)

// Limits of the TCP side, in one place. NSQ sets none of these; an nsqd that
// vanished without a FIN would otherwise hold its registrations forever.
const (
	// handshakeTimeout bounds the wait for the 4-byte protocol magic.
	handshakeTimeout = 10 * time.Second
	// minIdleTimeout is the floor of the wait for the next command. The
	// wait is max(--inactive-producer-timeout, minIdleTimeout): a peer that
	// silent is already hidden from /lookup, and nsqd PINGs every 15 s.
	minIdleTimeout = time.Minute
	// bodyTimeout bounds the wait for an IDENTIFY body once its size is read.
	bodyTimeout = 10 * time.Second
	// writeTimeout bounds each reply.
	writeTimeout = 10 * time.Second
	// maxLineLength is the longest command line, and the size of the only
	// per-connection read buffer. A valid line is under 150 bytes.
	maxLineLength = 1024
	// writeBufferSize holds a whole reply (the largest is the ~150 byte
	// IDENTIFY answer) so each reply is one write.
	writeBufferSize = 512
	// lingerTimeout and lingerMaxBytes bound how long and how much a
	// connection that got a fatal error is drained before it is closed.
	lingerTimeout  = 500 * time.Millisecond
	lingerMaxBytes = 64 << 10
	// maxIdentifyBody caps the IDENTIFY JSON; NSQ has no cap at all.
	maxIdentifyBody = 1 << 20
)

// tcpServer accepts nsqd connections and tracks them so Shutdown can close
// them.
type tcpServer struct {
	proto  *protocolV1
	logger *slog.Logger
	seq    atomic.Uint64 // numbers connections that have no remote address

	mu      sync.Mutex // guards conns and closing
	conns   map[net.Conn]struct{}
	closing bool
}

func newTCPServer(proto *protocolV1, logger *slog.Logger) *tcpServer {
	return &tcpServer{proto: proto, logger: logger, conns: make(map[net.Conn]struct{})}
}

// serve accepts until the listener is closed. Each connection runs in its
// own goroutine counted in wg. Accept errors other than a closed listener
// (EMFILE, ECONNABORTED) are retried with a capped backoff rather than
// taking the daemon down.
func (s *tcpServer) serve(l net.Listener, wg *sync.WaitGroup) {
	var backoff time.Duration
	for {
		conn, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.isClosing() {
				return
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.logf(slog.LevelWarn, "temporary Accept() failure - %s", err)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if !s.track(conn) {
			_ = conn.Close()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.untrack(conn)
			s.handle(conn)
		}()
	}
}

// logf logs as NSQ's nsqlookupd does: the values in the message.
func (s *tcpServer) logf(level slog.Level, format string, args ...any) {
	logging.Logf(s.logger, level, format, args...)
}

func (s *tcpServer) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// track records conn; it refuses once Shutdown has begun so that a
// connection accepted during Shutdown cannot escape closeConns.
func (s *tcpServer) track(conn net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.conns[conn] = struct{}{}
	return true
}

func (s *tcpServer) untrack(conn net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, conn)
}

// beginClose makes track refuse new connections.
func (s *tcpServer) beginClose() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing = true
}

// closeConns closes every tracked connection; their goroutines then see a
// read error, drop the peer's registrations and exit.
func (s *tcpServer) closeConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		_ = c.Close()
	}
}

// peerID is the producer identity of a connection: its remote address, as in
// NSQ. Unix-socket peers all share an empty address, so they get a sequence
// number to stay distinct.
func (s *tcpServer) peerID(conn net.Conn) string {
	if a, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
		return a.String()
	}
	addr := ""
	if conn.RemoteAddr() != nil {
		addr = conn.RemoteAddr().String()
	}
	return addr + "#" + strconv.FormatUint(s.seq.Add(1), 10)
}
