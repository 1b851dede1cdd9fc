package nsqd

import (
	"errors"
	"io"
	"net"
	"time"

	"github.com/nsqgo/nsq/internal/wire"
)

// serveTCP accepts connections until the listener closes.
func (n *NSQD) serveTCP(l net.Listener) {
	for {
		conn, err := l.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if !n.exiting() && !errors.Is(err, net.ErrClosed) {
				n.log.Error("accept", "err", err)
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

// handleConn reads the protocol magic and runs protocol V2.
func (n *NSQD) handleConn(conn net.Conn) {
	_ = conn.SetReadDeadline(time.Now().Add(n.opts.ClientTimeout))
	var magic [4]byte
	if _, err := io.ReadFull(conn, magic[:]); err != nil {
		conn.Close()
		return
	}
	if string(magic[:]) != wire.MagicV2 {
		n.log.Info("bad protocol magic", "client", conn.RemoteAddr().String(), "magic", string(magic[:]))
		_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
		_ = wire.WriteFrame(conn, wire.FrameTypeError, []byte("E_BAD_PROTOCOL"))
		conn.Close()
		return
	}
	c := newClient(n.clientIDs.Add(1), n, conn)
	if !n.addClient(c) {
		c.close()
		return
	}
	defer n.removeClient(c)
	c.startHeartbeats()
	c.ioLoop()
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
