package nsqd

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/internal/wire"
)

// serveTCP accepts connections until the listener closes.
func (n *NSQD) serveTCP(l net.Listener) {
	for {
		conn, err := l.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				n.logf(slog.LevelWarn, "temporary Accept() failure - %s", err)
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if !n.exiting() && !errors.Is(err, net.ErrClosed) {
				n.logf(slog.LevelError, "listener.Accept() error - %s", err)
			}
			return
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.handleConn(conn)
		}()
	}
}

// handleConn reads the protocol magic and runs protocol V2, logging the
// connection's life as NSQ does.
func (n *NSQD) handleConn(conn net.Conn) {
	addr := conn.RemoteAddr()
	n.logf(slog.LevelInfo, "TCP: new client(%s)", addr)
	_ = conn.SetReadDeadline(time.Now().Add(n.opts.ClientTimeout))
	var magic [4]byte
	if _, err := io.ReadFull(conn, magic[:]); err != nil {
		n.logf(slog.LevelError, "failed to read protocol version - %s", err)
		conn.Close()
		return
	}
	n.logf(slog.LevelInfo, "CLIENT(%s): desired protocol magic '%s'", addr, magic[:])
	if string(magic[:]) != wire.MagicV2 {
		_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
		_ = wire.WriteFrame(conn, wire.FrameTypeError, []byte("E_BAD_PROTOCOL"))
		conn.Close()
		n.logf(slog.LevelError, "client(%s) bad protocol magic '%s'", addr, magic[:])
		return
	}
	c := newClient(n.clientIDs.Add(1), n, conn)
	if !n.addClient(c) {
		c.close()
		return
	}
	defer n.removeClient(c)
	c.startHeartbeats()
	if err := c.ioLoop(); err != nil {
		n.logf(slog.LevelError, "client(%s) - %s", addr, err)
	}
}

// logf logs as NSQ's nsqd does: the values in the message.
func (n *NSQD) logf(level slog.Level, format string, args ...any) {
	logging.Logf(n.log, level, format, args...)
}

func (n *NSQD) addClient(c *client) bool {
	n.clientsMu.Lock()
	defer n.clientsMu.Unlock()
	if n.exiting() {
		return false
	}
	n.clients[c.id] = c
	return true
}

func (n *NSQD) removeClient(c *client) {
	n.clientsMu.Lock()
	delete(n.clients, c.id)
	n.clientsMu.Unlock()
}
