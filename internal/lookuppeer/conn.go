package lookuppeer

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/nsqgo/nsq/internal/wire"
)

// maxReply caps a lookupd reply; the largest real one (IDENTIFY) is ~150 B.
const maxReply = 64 << 10

// conn is the client end of protocol V1. Each command is one write and one
// reply read, each under its own deadline.
type conn struct {
	nc        net.Conn
	r         *bufio.Reader
	ioTimeout time.Duration
	buf       []byte // scratch for building a command; small, reused
}

func newConn(nc net.Conn, ioTimeout time.Duration) *conn {
	return &conn{nc: nc, r: bufio.NewReaderSize(nc, 256), ioTimeout: ioTimeout}
}

func (c *conn) write(b []byte) error {
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.ioTimeout))
	if _, err := c.nc.Write(b); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// read returns one [size][data] reply; an E_ reply is an error.
func (c *conn) read() ([]byte, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(c.ioTimeout))
	n, err := wire.ReadSize(c.r)
	if err != nil {
		return nil, fmt.Errorf("read reply size: %w", err)
	}
	if n < 0 || n > maxReply {
		return nil, fmt.Errorf("reply size %d out of range", n)
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(c.r, data); err != nil {
		return nil, fmt.Errorf("read reply: %w", err)
	}
	if bytes.HasPrefix(data, []byte("E_")) {
		return nil, &replyErr{data}
	}
	return data, nil
}

// closedByPeer reports a connection the lookupd has closed, without
// blocking: between commands nothing may arrive, so a read that does not
// time out at once means EOF (or unsolicited bytes, also an error).
func (c *conn) closedByPeer() error {
	_ = c.nc.SetReadDeadline(time.Now().Add(time.Millisecond))
	_, err := c.r.Peek(1)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	if err == nil {
		return errors.New("lookupd sent data unasked")
	}
	return fmt.Errorf("connection closed by lookupd: %w", err)
}

func (c *conn) writeMagic() error { return c.write([]byte(wire.MagicV1)) }

// identify sends IDENTIFY with body and returns lookupd's answer.
func (c *conn) identify(body []byte) ([]byte, error) {
	b := append(c.buf[:0], "IDENTIFY\n"...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	b = append(b, body...)
	if err := c.write(b); err != nil {
		return nil, err
	}
	return c.read()
}

// command sends "NAME topic [channel]" and expects OK.
func (c *conn) command(name string, r Registration) error {
	b := append(c.buf[:0], name...)
	b = append(b, ' ')
	b = append(b, r.Topic...)
	if r.Channel != "" {
		b = append(b, ' ')
		b = append(b, r.Channel...)
	}
	b = append(b, '\n')
	c.buf = b
	return c.expectOK(b)
}

func (c *conn) ping() error { return c.expectOK([]byte("PING\n")) }

func (c *conn) expectOK(line []byte) error {
	if err := c.write(line); err != nil {
		return err
	}
	resp, err := c.read()
	if err != nil {
		return err
	}
	if string(resp) != "OK" {
		return fmt.Errorf("unexpected reply %q", resp)
	}
	return nil
}
